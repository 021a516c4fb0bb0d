package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/store"
)

// attempt is one delivered message being worked on: the facts decide
// reads, and what the steps gathered beyond them.
type attempt struct {
	d *bus.Delivery
	// ctx is the message's; turnCtx the executing turn's, which a cancel
	// of the run (or a drain) ends.
	ctx, turnCtx context.Context
	f            facts
	ld           store.TurnLoadResult
	// prior, for a turn run in place, is the previous turn's events,
	// whose acks may still be coming back: they must be stored before
	// this turn publishes anything of its own.
	prior *bus.EventsSent
	// sent is every batch of events this message's turns sent; all are
	// stored before the message is acked.
	sent []*bus.EventsSent
	// baseCtx is turnCtx without the turn's span; traceIn is the trace
	// context the turn's span follows (the message's, or the turn run in
	// place before it), traceOut the turn's own for the next message;
	// endSpan ends the turn's span.
	baseCtx           context.Context
	traceIn, traceOut string
	endSpan           func(outcome string, err error)
}

// handle processes one delivery and settles it with the queue.
func (w *Worker) handle(ctx context.Context, d *bus.Delivery) {
	start := time.Now()
	stopKeepAlive := d.KeepAlive(ctx)
	v := w.process(ctx, d)
	// Before settling: a turn shed is kept alive anew while it waits.
	stopKeepAlive()
	if errors.Is(context.Cause(ctx), errAbandoned) {
		// Stopped as if crashed: leave the message for redelivery.
		v.settle = settleAbandon
	}
	w.settle(ctx, d, v)
	w.cfg.Metrics.turnDone(v.settle.String(), time.Since(start))
	if v.settle == settleAck {
		w.slots.grow()
	}
}

// process works the delivered turn through decide, step by step, and
// returns the verdict that settles its message.
func (w *Worker) process(ctx context.Context, d *bus.Delivery) verdict {
	t := d.Turn
	// The turn can be cancelled from here on: a cancel that arrives
	// while the run is being loaded must still reach its script.
	turnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	w.inflight[t.RunID] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inflight, t.RunID)
		w.mu.Unlock()
	}()

	a := &attempt{d: d, ctx: ctx, turnCtx: turnCtx, baseCtx: turnCtx, traceIn: t.Traceparent, f: facts{
		turn: t, exhausted: d.Exhausted(), firstAttempt: d.Attempts() == 1 && d.HandedBack == 0 && !t.Retried,
	}}
	defer func() { a.endTurnSpan("abandoned", nil) }()
	for {
		v := decide(a.f)
		switch v.next {
		case stepRead:
			run, err := w.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: a.f.turn.RunID})
			a.f.read = &readFacts{err: err, run: run}
		case stepLoad:
			ld, err := w.cfg.Store.TurnLoad(ctx, store.TurnLoadParams{
				RunID: t.RunID, Turn: t.Turn, HistoryFrom: w.cfg.Engine.HistoryFrom(t.Turn),
			})
			a.ld = ld
			a.f.load = &loadFacts{err: err, run: ld.Run, historyLoaded: ld.HistoryLoaded}
		case stepExecute:
			w.startTurnSpan(a)
			a.f.exec = w.execute(a)
		case stepCommit:
			a.f.commit = w.commit(a)
		case stepFinish:
			v, again := w.apply(a, v)
			if !again {
				a.endTurnSpan(v.settle.String(), v.err)
				return v
			}
		}
	}
}

// execute runs the loaded turn through the engine.
func (w *Worker) execute(a *attempt) *execFacts {
	run := a.ld.Run
	agent, err := w.agents.get(a.ctx, run.Tenant, run.Agent, run.AgentVersion)
	if err != nil {
		return &execFacts{err: fmt.Errorf("load agent %q version %d: %w", run.Agent, run.AgentVersion, err)}
	}
	var children []agentfleet.Run
	if len(run.WaitIDs) > 0 {
		if children, err = w.children(a.ctx, run); err != nil {
			return &execFacts{err: err}
		}
	}
	var secrets []agentfleet.OpenSecret
	if src := w.cfg.SecretSource; src != nil {
		// Every turn of the tenant, not only those whose agent names
		// secrets: any of their values is redacted wherever it shows.
		// A failure is the store's, not the run's: the turn is retried.
		if secrets, err = src.TenantSecrets(a.ctx, run.Tenant, agent.Secrets); err != nil {
			return &execFacts{err: fmt.Errorf("load the secrets of tenant %s for run %s (its agent %s names %d): %w",
				run.Tenant, run.ID, run.Agent, len(agent.Secrets), err)}
		}
	}
	// A session's run recalls the session's earlier runs; a run
	// without one reads nothing more.
	session, err := w.sessions.get(a.ctx, run)
	if err != nil {
		return &execFacts{err: err}
	}
	lib, err := w.skillLibrary(a.ctx, run, a.ld.SkillsRevision)
	if err != nil {
		return &execFacts{err: err}
	}
	var onChunk func(agentfleet.Event)
	if w.cfg.Bus != nil {
		onChunk = w.publishChunk
	}
	res, err := w.cfg.Engine.Step(a.turnCtx, loop.TurnInput{
		Run: run, Agent: agent, Steps: a.ld.Steps, Session: session, Secrets: w.cfg.Secrets, TenantSecrets: secrets,
		FirstAttempt: a.f.firstAttempt, TenantUnlimited: a.ld.TenantUnlimited,
		Spawn: w.spawner(a.ctx, run, run.Turn+1), IsChild: w.childOf(run), Children: children,
		Approval: w.approver(run, run.Turn+1), Skills: lib,
		OnChunk: onChunk,
	})
	if session != nil && err == nil && res.Outcome == loop.OutcomeFinished {
		w.sessions.forget(run.ID)
	}
	x := &execFacts{err: err, cause: context.Cause(a.turnCtx), res: res}
	if a.prior != nil && !errors.Is(x.cause, errAbandoned) {
		x.priorErr = w.awaitEvents(a.ctx, a.prior)
	}
	return x
}

// publishChunk sends a streamed piece of a turn's reply to the run's
// live subscribers (SSE, tenants' NATS consumers). Best effort: a lost
// chunk costs a subscriber only the live view, and the model_call event
// carries the whole reply.
func (w *Worker) publishChunk(ev agentfleet.Event) {
	if err := w.cfg.Bus.PublishChunk(ev); err != nil {
		w.cfg.Logger.Debug("publish response chunk", "run", ev.RunID, "turn", ev.Turn, "err", err)
	}
}

// commit commits the executed turn through the current group commit.
func (w *Worker) commit(a *attempt) *commitFacts {
	res, run := a.f.exec.res, a.ld.Run
	ch, err := w.commits.commit(a.ctx, store.TurnCommitParams{
		RunID: run.ID, Turn: res.Turn, Steps: res.Steps, Args: res.Args, Status: res.Status,
		Answer: res.Answer, Error: res.Error, Usage: res.Usage, DataBytesCarried: res.DataBytesCarried,
		Events: res.Events, Spawned: res.Spawned, WaitIDs: res.WaitIDs, WaitUntil: res.WaitUntil,
	})
	if err == nil {
		w.cfg.Metrics.turnCommitted(run.Tenant, res)
		w.ended(a, ch.Run)
	}
	return &commitFacts{err: err, change: ch, canRunInPlace: !w.isDraining() && a.turnCtx.Err() == nil}
}

// errChangeLost: a run change found the run changed meanwhile (ended,
// or moved on); the effects after it are moot.
var errChangeLost = errors.New("the run changed meanwhile")

// apply carries out a finishing verdict's effects in order and returns
// the verdict to settle with: v, or a retry when an effect failed. again
// reports that the attempt was set up for the next turn, to run in place.
func (w *Worker) apply(a *attempt, v verdict) (_ verdict, again bool) {
	ctx := a.ctx
	var sessionNext *agentfleet.Run
	for _, e := range v.effects {
		var err error
		switch e.kind {
		case effectChange:
			var ch store.RunChangeResult
			ch, err = w.change(a, e)
			if errors.Is(err, errChangeLost) {
				return v, false
			}
			if err == nil {
				err = w.owed(a).Changed(ctx, ch)
			}
		case effectFamily:
			err = w.owed(a).Settle(ctx, e.run)
		case effectRepublish:
			err = w.republish(a, e.run, e.from)
		case effectSendEvents:
			err = w.send(a, a.f.commit.change.Events)
		case effectAwaitEvents:
			err = w.awaitSent(a)
		case effectSessionNext:
			sessionNext = &e.run
			if e.lookup {
				sessionNext, err = store.SessionNext(ctx, w.cfg.Store, e.run.Tenant, e.run.SessionID)
			}
			if err == nil && sessionNext != nil {
				err = w.owed(a).Start(ctx, *sessionNext)
			}
		case effectContinue:
			err = w.continueRun(ctx, e.owedBy, e.run, e.retried, a.traceOut)
		case effectInPlace:
			w.cfg.Metrics.turnContinued(pathInPlace)
			a.endTurnSpan("in_place", nil)
			a.traceIn = a.traceOut
			next, ld := w.inPlace(a.f.turn, a.f.commit.change, a.ld)
			a.prior = a.sent[len(a.sent)-1]
			a.ld = ld
			a.f = facts{turn: next, firstAttempt: true, inPlace: true,
				load: &loadFacts{run: ld.Run, historyLoaded: ld.HistoryLoaded}}
			return v, true
		}
		if err != nil {
			return retry(err), false
		}
	}
	if v.settle == settleAck {
		// A message acked is never seen again: what its turns sent
		// must be stored first.
		if err := w.awaitSent(a); err != nil {
			return retry(err), false
		}
	}
	return v, false
}

// change makes a run change outside a commit.
func (w *Worker) change(a *attempt, e effect) (store.RunChangeResult, error) {
	ctx, run := a.ctx, e.run
	var p store.RunTransitionParams
	switch e.change {
	case changeApproval:
		return w.park(a, run)
	case changeCancel:
		// No error of its own: the run ends with its cancel's reason.
		p = store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusCancelled,
			Events: []agentfleet.Event{
				runEvent(run, agentfleet.EventCancelled, "cancelled at a turn boundary"),
				runEvent(run, agentfleet.EventDone, string(agentfleet.StatusCancelled)),
			}}
	case changeNoBudget:
		tenant, err := w.cfg.Store.TenantGetByID(ctx, run.Tenant)
		if err != nil {
			return store.RunChangeResult{}, fmt.Errorf("load tenant for its budget policy: %w", err)
		}
		p = noBudgetChange(run, a.f.exec.res.Budget, tenant.Exhausted)
	case changeDeadLetter:
		reason := w.deadLetterReason(a.d)
		p = store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusFailed, Error: reason,
			Events: []agentfleet.Event{
				runEvent(run, agentfleet.EventError, reason),
				runEvent(run, agentfleet.EventDone, string(agentfleet.StatusFailed)),
			}}
	}
	ch, err := w.cfg.Store.RunTransition(ctx, p)
	switch {
	case errors.Is(err, store.ErrConflict), e.change == changeCancel && errors.Is(err, store.ErrInvalid):
		return ch, errChangeLost
	case err != nil:
		return ch, fmt.Errorf("change run %s to %s: %w", run.ID, p.To, err)
	}
	w.ended(a, ch.Run)
	return ch, nil
}

// ended counts and traces a run that a commit or change of this worker
// ended.
func (w *Worker) ended(a *attempt, run agentfleet.Run) {
	if run.Status.Terminal() {
		w.cfg.Metrics.runEnded(run)
		w.cfg.Tracer.EndRun(a.ctx, run)
		w.learn(a.ctx, run)
	}
}

// settle settles the message as v says.
func (w *Worker) settle(ctx context.Context, d *bus.Delivery, v verdict) {
	t := d.Turn
	switch v.settle {
	case settleAck:
		if v.reason != "" {
			w.log.Error(v.reason, "run", t.RunID, "turn", t.Turn)
		}
		// Without waiting for the server to confirm: a lost ack only
		// brings the turn back, whose commit is then found and what it
		// owed published again, and the slot is free a round trip
		// sooner.
		if err := d.AckAsync(); err != nil {
			w.log.Warn("ack turn", "run", t.RunID, "turn", t.Turn, "err", err)
		}
	case settleRetry:
		delay := w.retryDelay(d.Attempts())
		w.log.Warn("turn failed, will retry", "run", t.RunID, "turn", t.Turn,
			"attempt", d.Attempts(), "retry_in", delay, "err", v.err)
		_ = d.NakWithDelay(delay)
	case settleShed:
		w.shed(ctx, d, v.err)
	case settleHandBack:
		_ = d.NakWithDelay(0)
	case settleTerm:
		w.log.Error("turn message for an unknown run; dropping it", "run", t.RunID, "turn", t.Turn)
		_ = d.Term(v.reason)
	case settleDeadLetter:
		reason := w.deadLetterReason(d)
		if err := d.DeadLetter(context.WithoutCancel(ctx), reason); err != nil {
			delay := w.retryDelay(d.Attempts())
			w.log.Warn("dead-letter turn failed, will retry", "run", t.RunID, "turn", t.Turn, "retry_in", delay, "err", err)
			_ = d.NakWithDelay(delay)
			return
		}
		w.log.Error("turn dead-lettered", "run", t.RunID, "turn", t.Turn, "reason", reason)
	case settleAbandon:
	}
}

func (w *Worker) deadLetterReason(d *bus.Delivery) string {
	return fmt.Sprintf("turn %d was attempted %d times without success (max %d)", d.Turn.Turn, d.Attempts()-1, d.MaxDeliver())
}

// shed hands back a turn this worker failed for want of its own
// resources: it takes fewer turns from now on (the slots grow back with
// each success), holds the message for a back-off without a slot, then
// publishes the turn anew uncounted (bus.Delivery.HandBack). A drain
// hands it back at once; a stop (ctx) leaves it, as a crash would.
func (w *Worker) shed(ctx context.Context, d *bus.Delivery, err error) {
	t := d.Turn
	limit := w.slots.shrink()
	delay := w.retryDelay(d.HandedBack + 1)
	w.log.Warn("worker out of resources: handing the turn back, taking fewer turns", "run", t.RunID, "turn", t.Turn,
		"slots", limit, "retry_in", delay, "err", err)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		stop := d.KeepAlive(ctx)
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-w.drainCtx.Done():
		case <-ctx.Done():
		}
		stop()
		if ctx.Err() != nil && !w.isDraining() {
			return
		}
		if err := d.HandBack(context.WithoutCancel(ctx)); err != nil {
			// Counted after all: better than holding the turn.
			w.log.Warn("hand back turn failed, will retry", "run", t.RunID, "turn", t.Turn, "err", err)
			_ = d.NakWithDelay(delay)
		}
	}()
}

func (w *Worker) retryDelay(attempt uint64) time.Duration {
	d := w.cfg.RetryDelay
	for i := uint64(1); i < attempt && d < RetryDelayMax; i++ {
		d *= 2
	}
	d = min(d, RetryDelayMax)
	// Jitter so a fleet-wide outage does not retry in lockstep.
	return d/2 + rand.N(d/2+1)
}

// inPlace is the turn after t, which ch has just committed, and its load,
// for running it at once in this slot under t's message instead of
// publishing it: that saves the next turn its trip through the queue (a
// stored message, a pull, an ack) and its load from the store, since the
// run and its history are at hand.
//
// decide allows it only when the scheduler marked t Direct (no other
// tenant's turn was waiting), so it costs fairness what publishing
// straight to AF_WORK costs, no more: the next turn is not Direct, so a
// run still passes through the scheduler at least every other turn; and
// only on t's first attempt: t's message stays un-acked (and kept alive)
// while the next turn runs, so a crash or failure of that turn
// redelivers t, whose redelivery publishes the next turn (republish),
// marked Retried so that it looks for the model reply its attempt in
// place may have recorded. The first attempt rule keeps that one extra
// delivery of t within MaxDeliver.
func (w *Worker) inPlace(t bus.Turn, ch store.RunChangeResult, ld store.TurnLoadResult) (bus.Turn, store.TurnLoadResult) {
	run := ch.Run
	next := bus.NextTurn(run)
	// The history TurnLoad would read: the steps of turns from
	// HistoryFrom up to the one just committed.
	from := w.cfg.Engine.HistoryFrom(next.Turn)
	steps := make([]agentfleet.Step, 0, len(ld.Steps)+len(ch.Steps))
	for _, s := range ld.Steps {
		if s.Turn >= from {
			steps = append(steps, s)
		}
	}
	steps = append(steps, ch.Steps...)
	// What the load read of the tenant holds for the turn in place too
	// (at most every other turn, see above, reads it again).
	return next, store.TurnLoadResult{Run: run, TenantUnlimited: ld.TenantUnlimited, SkillsRevision: ld.SkillsRevision,
		Steps: steps, HistoryLoaded: true}
}

// send sends events without waiting for their acks; awaitSent waits.
func (w *Worker) send(a *attempt, evs []agentfleet.Event) error {
	sent, err := w.cfg.Bus.SendEvents(evs)
	if err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	a.sent = append(a.sent, sent)
	return nil
}

// awaitSent waits until every batch of events the attempt sent is stored.
func (w *Worker) awaitSent(a *attempt) error {
	for _, sent := range a.sent {
		if err := w.awaitEvents(a.ctx, sent); err != nil {
			return err
		}
	}
	return nil
}

// awaitEvents waits for the acks of events sent, within publishTimeout
// whatever ctx: the turn's outcome depends on them.
func (w *Worker) awaitEvents(ctx context.Context, sent *bus.EventsSent) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := sent.Wait(pctx); err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	return nil
}

// republish sends again the run's stored events of turns from turn on.
func (w *Worker) republish(a *attempt, run agentfleet.Run, turn int) error {
	evs, err := w.cfg.Store.EventListByRun(a.ctx, store.EventListByRunParams{RunID: run.ID})
	if err != nil {
		return fmt.Errorf("load events to republish: %w", err)
	}
	var owed []agentfleet.Event
	for _, ev := range evs {
		if ev.Turn >= turn {
			owed = append(owed, ev)
		}
	}
	return w.send(a, owed)
}

// continueRun publishes the turn after prev, which run has committed:
// past the scheduler when prev's message allows it. retried marks a turn
// a redelivery publishes (bus.Turn.Retried).
func (w *Worker) continueRun(ctx context.Context, prev bus.Turn, run agentfleet.Run, retried bool, traceparent string) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	next := bus.NextTurn(run)
	next.Retried, next.Traceparent = retried, traceparent
	direct, err := w.cfg.Bus.ContinueTurn(pctx, prev, next)
	if err != nil {
		return fmt.Errorf("enqueue turn %d of run %s: %w", next.Turn, run.ID, err)
	}
	path := pathScheduler
	if direct {
		path = pathDirect
	}
	w.cfg.Metrics.turnContinued(path)
	return nil
}

// runEvent is an event about a run outside a turn's own events.
func runEvent(run agentfleet.Run, typ agentfleet.EventType, summary string) agentfleet.Event {
	return agentfleet.Event{
		V: agentfleet.EventVersion, RunID: run.ID, Tenant: run.Tenant, SessionID: run.SessionID,
		Turn: run.Turn, Type: typ, TS: time.Now().UTC(), Summary: summary,
	}
}

// startTurnSpan starts the span of the turn a is about to execute, and
// makes its context the turn's.
func (w *Worker) startTurnSpan(a *attempt) {
	if a.f.turn.Turn == 1 && a.f.firstAttempt {
		w.cfg.Metrics.firstTurn(a.ld.Run)
	}
	ctx, end := w.cfg.Tracer.StartTurn(a.baseCtx, a.ld.Run, a.f.turn.Turn, a.traceIn)
	a.turnCtx, a.endSpan, a.traceOut = ctx, end, w.cfg.Tracer.Traceparent(ctx)
}

// endTurnSpan ends the turn's span, if one is open.
func (a *attempt) endTurnSpan(outcome string, err error) {
	if a.endSpan != nil {
		a.endSpan(outcome, err)
		a.endSpan = nil
	}
	a.turnCtx = a.baseCtx
}

// owed is the outbox of what a's changes owe. Its events go with the
// attempt's others and are waited for before it returns (so they are
// stored before the turns that follow them, and before the ack); with a
// nil attempt they are sent and waited for alone.
func (w *Worker) owed(a *attempt) outbox.Outbox {
	return outbox.Outbox{Bus: outboxBus{w: w, a: a}, Store: w.cfg.Store, Log: w.log, Timeout: publishTimeout}
}

// outboxBus is the worker's Bus as the outbox publishes through it.
type outboxBus struct {
	w *Worker
	a *attempt
}

func (b outboxBus) PublishEvents(ctx context.Context, evs []agentfleet.Event) error {
	if b.a != nil {
		if err := b.w.send(b.a, evs); err != nil {
			return err
		}
		return b.w.awaitSent(b.a)
	}
	sent, err := b.w.cfg.Bus.SendEvents(evs)
	if err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	return b.w.awaitEvents(ctx, sent)
}

func (b outboxBus) PublishEventsBulk(ctx context.Context, evs []agentfleet.Event) error {
	return b.PublishEvents(ctx, evs)
}

func (b outboxBus) EnqueueTurn(ctx context.Context, t bus.Turn) error {
	return b.w.cfg.Bus.EnqueueTurn(ctx, t)
}

func (b outboxBus) PublishControl(ctx context.Context, tenant, runID, verb string) error {
	return b.w.cfg.Bus.PublishControl(ctx, tenant, runID, verb)
}
