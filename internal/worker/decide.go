package worker

import (
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/store"
)

// The turn lifecycle is one pure function, decide, from what the worker
// knows of a delivered turn (facts) to what it does next (verdict). The
// worker gathers facts a step at a time (read, load, execute, commit) and
// asks decide again after each, until the verdict is to finish: apply its
// effects in order and settle the message. Every crash rule of the worker
// is a branch of decide, and decide_test.go holds a row for each.

// step is what the worker does next for a delivered turn.
type step int

const (
	// stepRead reads the run as it is (store RunGetByID): before
	// dead-lettering, and after a lost fence.
	stepRead step = iota + 1
	// stepLoad loads the run for its turn (store TurnLoad, which starts
	// a queued run).
	stepLoad
	// stepExecute runs the turn (loop.Engine.Step).
	stepExecute
	// stepCommit commits the turn's result.
	stepCommit
	// stepFinish applies the verdict's effects and settles the message.
	stepFinish
)

// facts is what the worker knows of one turn attempt. Each step fills one
// more part; a nil part has not been gathered yet.
type facts struct {
	// turn is the turn this attempt executes. It is the delivered
	// message's turn, or the turn after it when run in place.
	turn bus.Turn
	// exhausted: the turn was attempted more than MaxDeliver times
	// (bus.Delivery.Exhausted; hand-backs for the worker's own
	// exhaustion do not count).
	exhausted bool
	// firstAttempt: no earlier attempt of turn can have called the model
	// (the message's first delivery, not published by a redelivery; a
	// turn run in place).
	firstAttempt bool
	// inPlace: turn runs in place, under the message of the turn before
	// it (see worker.inPlace).
	inPlace bool

	read   *readFacts
	load   *loadFacts
	exec   *execFacts
	commit *commitFacts
}

type readFacts struct {
	err error
	run agentfleet.Run
}

type loadFacts struct {
	err           error
	run           agentfleet.Run
	historyLoaded bool
}

type execFacts struct {
	// err is the engine's (or the agent lookup's) error; cause is why
	// the turn's context ended, if it did (errAbandoned, errHandBack,
	// errCancelled).
	err   error
	cause error
	// priorErr: the previous turn's events, sent before this turn ran in
	// place, were not stored.
	priorErr error
	res      loop.TurnResult
}

type commitFacts struct {
	err    error
	change store.RunChangeResult
	// canRunInPlace: the worker may run the next turn in this slot now
	// (not draining, the turn's context alive).
	canRunInPlace bool
}

// settleKind is how the message is settled.
type settleKind int

const (
	// settleAck: the turn is done (or nothing is left to do for it).
	settleAck settleKind = iota + 1
	// settleRetry: NakWithDelay, backing off by delivery count.
	settleRetry
	// settleHandBack: Nak at once, for another worker (a drain).
	settleHandBack
	// settleTerm: drop the message for good (its run does not exist).
	settleTerm
	// settleDeadLetter: move the message to the dead-letter stream.
	settleDeadLetter
	// settleAbandon: leave the message un-acked, as a crash would.
	settleAbandon
	// settleShed: the worker ran out of a resource of its own
	// (agentfleet.ErrExhausted): hand the turn back after a delay
	// without counting the attempt (bus.Delivery.HandBack), and take
	// fewer turns.
	settleShed
)

func (k settleKind) String() string {
	switch k {
	case settleAck:
		return "ack"
	case settleRetry:
		return "retry"
	case settleHandBack:
		return "hand_back"
	case settleTerm:
		return "term"
	case settleDeadLetter:
		return "dead_letter"
	case settleAbandon:
		return "abandoned"
	case settleShed:
		return "shed"
	}
	return fmt.Sprintf("settleKind(%d)", int(k))
}

// effectKind is one thing a finishing verdict does before it settles.
type effectKind int

const (
	// effectChange makes a run change outside a commit (change says
	// which) and publishes its events.
	effectChange effectKind = iota + 1
	// effectRepublish publishes again the run's stored events from turn
	// from on, as a commit of that turn owed them.
	effectRepublish
	// effectSendEvents sends the committed turn's events.
	effectSendEvents
	// effectAwaitEvents waits until the events sent are stored.
	effectAwaitEvents
	// effectSessionNext starts the session's next run: the one the
	// commit handed out, or (lookup) the one the store has next.
	effectSessionNext
	// effectContinue publishes the turn after owedBy (bus.ContinueTurn).
	effectContinue
	// effectInPlace runs the turn after this one at once, in this slot,
	// under this message.
	effectInPlace
	// effectFamily settles what the end of run owes its family
	// (store.RunFamilySettle): its waiting parent woken, its unfinished
	// children cancelled. A change that ends a run does the same.
	effectFamily
)

// changeKind is a run change outside a commit.
type changeKind int

const (
	// changeCancel ends a run whose cancel was requested.
	changeCancel changeKind = iota + 1
	// changeNoBudget parks the run or fails it, by the tenant's policy.
	changeNoBudget
	// changeDeadLetter fails a run whose turn was dead-lettered.
	changeDeadLetter
	// changeApproval parks the run on the call its turn stopped at, to
	// wait for a person (store.ApprovalRequest).
	changeApproval
)

type effect struct {
	kind   effectKind
	change changeKind
	// run is the run the effect is about, as last read or committed.
	run agentfleet.Run
	// from is effectRepublish's first turn.
	from int
	// lookup: effectSessionNext asks the store which run is next.
	lookup bool
	// owedBy and retried are effectContinue's: the turn whose
	// continuation this is, and bus.Turn.Retried of the next turn.
	owedBy  bus.Turn
	retried bool
}

// verdict is what decide says to do: gather another fact (next), or
// finish: apply effects in order, then settle. An effect that fails
// settles the message for a retry instead.
type verdict struct {
	next    step
	effects []effect
	settle  settleKind
	// reason is the settle's reason (term, dead letter) or what to log
	// with it; err the failure a retry logs.
	reason string
	err    error
}

func finish(s settleKind, effects ...effect) verdict {
	return verdict{next: stepFinish, settle: s, effects: effects}
}

// retry settles a failed attempt for another: counted (settleRetry), or,
// when the worker's own resources failed it, not (settleShed).
func retry(err error) verdict {
	if agentfleet.Exhausted(err) {
		return verdict{next: stepFinish, settle: settleShed, err: err}
	}
	return verdict{next: stepFinish, settle: settleRetry, err: err}
}

// decide is the turn lifecycle. See the comment at the top of this file.
func decide(f facts) verdict {
	t := f.turn
	if f.exhausted && !f.inPlace {
		return decideExhausted(f)
	}
	if f.load == nil {
		return verdict{next: stepLoad}
	}
	if f.exec == nil {
		return decideLoaded(f)
	}
	if f.commit == nil {
		return decideExecuted(f)
	}
	if f.read != nil {
		return decideLostFence(f, f.read, f.exec.res.Turn)
	}
	c := f.commit
	switch {
	case errors.Is(c.err, store.ErrConflict):
		return verdict{next: stepRead}
	case c.err != nil:
		return retry(fmt.Errorf("commit turn: %w", c.err))
	}
	run := c.change.Run
	effects := []effect{{kind: effectSendEvents}}
	if run.Status == agentfleet.StatusRunning && !run.CancelRequested && t.Direct && f.firstAttempt && c.canRunInPlace {
		return finish(settleAck, append(effects, effect{kind: effectInPlace, run: run})...)
	}
	effects = append(effects, effect{kind: effectAwaitEvents})
	if c.change.SessionNext != nil {
		effects = append(effects, effect{kind: effectSessionNext, run: *c.change.SessionNext})
	}
	switch {
	case run.Status == agentfleet.StatusRunning && run.CancelRequested:
		effects = append(effects, effect{kind: effectChange, change: changeCancel, run: run})
	case run.Status == agentfleet.StatusRunning:
		effects = append(effects, effect{kind: effectContinue, run: run, owedBy: t})
	case outbox.HasFamily(run):
		effects = append(effects, effect{kind: effectFamily, run: run})
	}
	return finish(settleAck, effects...)
}

// decideExhausted gives up on a message delivered more than MaxDeliver
// times: its run fails (unless it ended) and the message is dead-lettered.
func decideExhausted(f facts) verdict {
	if f.read == nil {
		return verdict{next: stepRead}
	}
	v := finish(settleDeadLetter)
	switch {
	case errors.Is(f.read.err, store.ErrNotFound):
	case f.read.err != nil:
		return retry(fmt.Errorf("load dead-lettered run: %w", f.read.err))
	case !f.read.run.Status.Terminal():
		v.effects = []effect{{kind: effectChange, change: changeDeadLetter, run: f.read.run}}
	}
	return v
}

// decideLoaded decides what a loaded turn is owed before it runs.
func decideLoaded(f facts) verdict {
	t, ld := f.turn, f.load
	run := ld.run
	switch {
	case errors.Is(ld.err, store.ErrNotFound):
		v := finish(settleTerm)
		v.reason = "unknown run"
		return v
	case ld.err != nil:
		return retry(fmt.Errorf("load run: %w", ld.err))
	case t.Turn <= run.Turn:
		// Redelivered after its commit: finish what the commit owed.
		return republish(t, run, t.Turn)
	case t.Turn > run.Turn+1:
		v := finish(settleAck)
		v.reason = fmt.Sprintf("turn message ahead of the run (committed %d); dropping it", run.Turn)
		return v
	case run.Status.Terminal(), run.Status.Waiting():
		// Ended, or parked after this message was sent (the resume
		// sends anew).
		return finish(settleAck)
	case run.CancelRequested:
		return finish(settleAck, effect{kind: effectChange, change: changeCancel, run: run})
	case run.Status == agentfleet.StatusQueued:
		// TurnLoad starts every run it may; one still queued here
		// changed under it. Try again from the top.
		return retry(fmt.Errorf("run %s is still queued at turn %d", run.ID, t.Turn))
	case t.Turn > 1 && !ld.historyLoaded:
		return retry(fmt.Errorf("run %s: history of turn %d not loaded", run.ID, t.Turn))
	}
	return verdict{next: stepExecute}
}

// decideExecuted decides what an executed turn does with its result.
func decideExecuted(f facts) verdict {
	x := f.exec
	run := f.load.run
	switch {
	case errors.Is(x.cause, errAbandoned):
		return finish(settleAbandon)
	case x.priorErr != nil:
		// The previous turn's events were not all stored; this turn's
		// must not go out ahead of their retry.
		return retry(x.priorErr)
	case errors.Is(x.err, loop.ErrStale):
		if f.read == nil {
			return verdict{next: stepRead}
		}
		return decideLostFence(f, f.read, run.Turn+1)
	case errors.Is(x.cause, errHandBack):
		v := finish(settleHandBack)
		v.err = x.cause
		return v
	case errors.Is(x.cause, errCancelled):
		return finish(settleAck, effect{kind: effectChange, change: changeCancel, run: run})
	case x.err != nil:
		return retry(x.err)
	case x.res.Outcome == loop.OutcomeNoBudget:
		return finish(settleAck, effect{kind: effectChange, change: changeNoBudget, run: run})
	case x.res.Outcome == loop.OutcomeApproval:
		return finish(settleAck, effect{kind: effectChange, change: changeApproval, run: run})
	}
	return verdict{next: stepCommit}
}

// decideLostFence decides, from the run read again, about a turn whose
// commit (or reply record) found the run moved on.
func decideLostFence(f facts, r *readFacts, turn int) verdict {
	switch {
	case r.err != nil:
		return retry(fmt.Errorf("reload run after a lost fence: %w", r.err))
	case turn > r.run.Turn:
		// Lost to a status change (cancelled, failed), not to another
		// commit of this turn.
		return finish(settleAck)
	}
	return republish(f.turn, r.run, turn)
}

// republish re-sends what the commit of turn owed: its events, the
// session's next run when it ended the run, and the turn after it. Every
// publish is deduplicated by message id, so repeating one that already
// went out is harmless.
func republish(prev bus.Turn, run agentfleet.Run, turn int) verdict {
	effects := []effect{{kind: effectRepublish, run: run, from: turn}, {kind: effectAwaitEvents}}
	if run.Status.Terminal() && run.SessionID != "" {
		effects = append(effects, effect{kind: effectSessionNext, run: run, lookup: true})
	}
	if outbox.HasFamily(run) {
		effects = append(effects, effect{kind: effectFamily, run: run})
	}
	if run.Status == agentfleet.StatusRunning {
		switch {
		case run.Turn == turn:
			effects = append(effects, effect{kind: effectContinue, run: run, owedBy: prev, retried: true})
		case run.Turn == turn+1 && prev.Direct && prev.Turn == turn:
			// The turn after prev may have run in place under prev's
			// message and been committed, and the worker failed before
			// publishing the turn after that one: this delivery owes it.
			// If that turn ran from a message of its own instead, that
			// message published the same turn, and the message id drops
			// this copy.
			owedBy := bus.NextTurn(run)
			owedBy.Turn = run.Turn // the message of the turn run in place
			effects = append(effects, effect{kind: effectContinue, run: run, owedBy: owedBy, retried: true})
		}
	}
	return finish(settleAck, effects...)
}

// noBudgetChange is the run change for a run whose tenant had no budget
// for its model call: park it until budget returns, or fail it, by the
// tenant's policy.
func noBudgetChange(run agentfleet.Run, be *agentfleet.BudgetExhaustedError, policy agentfleet.ExhaustedPolicy) store.RunTransitionParams {
	p := store.RunTransitionParams{ID: run.ID, From: []agentfleet.RunStatus{agentfleet.StatusRunning}}
	if policy == agentfleet.ExhaustedFail {
		p.To, p.Error = agentfleet.StatusFailed, be.Error()
		p.Events = []agentfleet.Event{
			runEvent(run, agentfleet.EventError, be.Error()),
			runEvent(run, agentfleet.EventDone, string(agentfleet.StatusFailed)),
		}
		return p
	}
	p.To = agentfleet.StatusWaitingBudget
	ev := runEvent(run, agentfleet.EventBudgetWaiting, fmt.Sprintf("needs %d tokens, %d left of %d", be.Need, be.Left(), be.Limit))
	ev.Content = be.Error()
	p.Events = []agentfleet.Event{ev}
	return p
}
