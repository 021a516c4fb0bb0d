package worker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store"
)

// describe renders a verdict for the table: the next step, or the settle
// and its effects in order, e.g. "ack: send, await, continue 3".
func describe(v verdict) string {
	switch v.next {
	case stepRead:
		return "read"
	case stepLoad:
		return "load"
	case stepExecute:
		return "execute"
	case stepCommit:
		return "commit"
	}
	var effects []string
	for _, e := range v.effects {
		switch e.kind {
		case effectChange:
			effects = append(effects, map[changeKind]string{changeCancel: "cancel", changeNoBudget: "no budget", changeDeadLetter: "fail", changeApproval: "park for approval"}[e.change])
		case effectRepublish:
			effects = append(effects, fmt.Sprintf("republish from %d", e.from))
		case effectSendEvents:
			effects = append(effects, "send")
		case effectAwaitEvents:
			effects = append(effects, "await")
		case effectSessionNext:
			if e.lookup {
				effects = append(effects, "session next (look up)")
			} else {
				effects = append(effects, "session next "+e.run.ID)
			}
		case effectContinue:
			s := fmt.Sprintf("continue %d", e.owedBy.Turn)
			if e.owedBy.Direct {
				s += " direct"
			}
			if e.retried {
				s += " retried"
			}
			effects = append(effects, s)
		case effectInPlace:
			effects = append(effects, "in place")
		case effectFamily:
			effects = append(effects, "family")
		}
	}
	s := v.settle.String()
	if len(effects) > 0 {
		s += ": " + strings.Join(effects, ", ")
	}
	return s
}

// Every branch of the turn lifecycle, as a worker meets it: the facts it
// has gathered so far, and what it must do next.
func TestDecide(t *testing.T) {
	t.Parallel()
	errDown := errors.New("store is down")
	// The errors exhaustion surfaces as: the model client's dial, the
	// sandbox's process start, a store's own open.
	errModelFDs := fmt.Errorf("model call: %w", fmt.Errorf("%w: connect to the model: %w", agentfleet.ErrExhausted,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}))
	errSandboxStart := fmt.Errorf("execute script of turn 4: %w", fmt.Errorf("%w: %w", agentfleet.ErrExhausted,
		fmt.Errorf("sandbox: start process: %w", os.NewSyscallError("fork/exec", syscall.EAGAIN))))
	errStoreFDs := fmt.Errorf("load run: %w", &os.PathError{Op: "open", Path: "agentfleet.db-wal", Err: syscall.ENFILE})
	turn := func(n int) bus.Turn { return bus.Turn{RunID: "r1", Tenant: "acme", Turn: n} }
	direct := func(n int) bus.Turn { t := turn(n); t.Direct = true; return t }
	run := func(committed int, status agentfleet.RunStatus) agentfleet.Run {
		return agentfleet.Run{ID: "r1", Tenant: "acme", Turn: committed, Status: status}
	}
	loaded := func(r agentfleet.Run) *loadFacts { return &loadFacts{run: r, historyLoaded: true} }
	ran := func(res loop.TurnResult) *execFacts { return &execFacts{res: res} }
	cont := loop.TurnResult{Turn: 4, Outcome: loop.OutcomeContinue, Status: agentfleet.StatusRunning}
	committed := func(r agentfleet.Run) *commitFacts {
		return &commitFacts{change: store.RunChangeResult{Run: r}, canRunInPlace: true}
	}
	withSession := func(r agentfleet.Run) agentfleet.Run { r.SessionID = "s1"; return r }
	cancelling := func(r agentfleet.Run) agentfleet.Run { r.CancelRequested = true; return r }
	next := agentfleet.Run{ID: "r2", Tenant: "acme", SessionID: "s1"}
	child := func(r agentfleet.Run) agentfleet.Run { r.ParentRunID = "r0"; r.Depth = 1; return r }
	parent := func(r agentfleet.Run) agentfleet.Run { r.Children = 3; return r }

	cases := []struct {
		name string
		f    facts
		want string
	}{
		// A message arrives.
		{"a new delivery loads its run", facts{turn: turn(4), firstAttempt: true}, "load"},
		{"a message delivered too often reads its run", facts{turn: turn(4), exhausted: true}, "read"},
		{"and fails the run before dead-lettering", facts{turn: turn(4), exhausted: true, read: &readFacts{run: run(3, agentfleet.StatusRunning)}}, "dead_letter: fail"},
		{"a run that ended is left as it is", facts{turn: turn(4), exhausted: true, read: &readFacts{run: run(3, agentfleet.StatusCompleted)}}, "dead_letter"},
		{"an unknown run's message is dead-lettered", facts{turn: turn(4), exhausted: true, read: &readFacts{err: store.ErrNotFound}}, "dead_letter"},
		{"a store that fails the read is retried", facts{turn: turn(4), exhausted: true, read: &readFacts{err: errDown}}, "retry"},

		// The run is loaded.
		{"an unknown run's message is dropped", facts{turn: turn(4), load: &loadFacts{err: store.ErrNotFound}}, "term"},
		{"a failed load is retried", facts{turn: turn(4), load: &loadFacts{err: errDown}}, "retry"},
		{"a redelivered committed turn republishes and continues", facts{turn: turn(4), load: loaded(run(4, agentfleet.StatusRunning))},
			"ack: republish from 4, await, continue 4 retried"},
		{"a redelivered turn that ended its session's run starts the next", facts{turn: turn(4), load: loaded(withSession(run(4, agentfleet.StatusCompleted)))},
			"ack: republish from 4, await, session next (look up)"},
		{"a redelivered turn that ended a run without a session", facts{turn: turn(4), load: loaded(run(4, agentfleet.StatusFailed))},
			"ack: republish from 4, await"},
		{"an older turn redelivered owes only its events", facts{turn: turn(3), load: loaded(run(4, agentfleet.StatusRunning))},
			"ack: republish from 3, await"},
		{"a redelivered Direct turn whose successor did not commit continues straight to the workers", facts{turn: direct(4), load: loaded(run(4, agentfleet.StatusRunning))},
			"ack: republish from 4, await, continue 4 direct retried"},
		{"a redelivered Direct turn whose successor ran in place and committed owes the turn after that", facts{turn: direct(4), load: loaded(run(5, agentfleet.StatusRunning))},
			"ack: republish from 4, await, continue 5 retried"},
		{"a redelivered Direct turn two turns behind owes nothing more", facts{turn: direct(4), load: loaded(run(6, agentfleet.StatusRunning))},
			"ack: republish from 4, await"},
		{"a turn ahead of the run is dropped", facts{turn: turn(6), load: loaded(run(3, agentfleet.StatusRunning))}, "ack"},
		{"a turn of an ended run is dropped", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusCancelled))}, "ack"},
		{"a turn of a parked run is dropped (its resume sends anew)", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusWaitingBudget))}, "ack"},
		{"a cancel requested ends the run at the boundary", facts{turn: turn(4), load: loaded(cancelling(run(3, agentfleet.StatusRunning)))}, "ack: cancel"},
		{"a run still queued is retried", facts{turn: turn(1), load: loaded(run(0, agentfleet.StatusQueued))}, "retry"},
		{"a load without the history is retried", facts{turn: turn(4), load: &loadFacts{run: run(3, agentfleet.StatusRunning)}}, "retry"},
		{"the first turn needs no history", facts{turn: turn(1), load: &loadFacts{run: run(0, agentfleet.StatusRunning)}}, "execute"},
		{"a due turn runs", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning))}, "execute"},

		// The engine ran it.
		{"a worker stopped as if crashed leaves the message", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{cause: errAbandoned, err: errAbandoned}}, "abandoned"},
		{"a turn in place whose predecessor's events failed is retried", facts{turn: turn(4), inPlace: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{priorErr: errDown, res: cont}}, "retry"},
		{"a stale turn reads the run again", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: loop.ErrStale}}, "read"},
		{"a stale turn another attempt committed republishes", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: loop.ErrStale}, read: &readFacts{run: run(4, agentfleet.StatusRunning)}},
			"ack: republish from 4, await, continue 4 retried"},
		{"a stale turn whose run ended meanwhile is done", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: loop.ErrStale}, read: &readFacts{run: run(3, agentfleet.StatusCancelled)}}, "ack"},
		{"a stale turn whose reread fails is retried", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: loop.ErrStale}, read: &readFacts{err: errDown}}, "retry"},
		{"a drain hands the turn back", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{cause: errHandBack, err: errHandBack}}, "hand_back"},
		{"a cancel interrupting the turn ends the run", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{cause: errCancelled, err: errCancelled}}, "ack: cancel"},
		{"an engine failure is retried", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: errDown}}, "retry"},
		{"no budget parks or fails the run", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(loop.TurnResult{Outcome: loop.OutcomeNoBudget})}, "ack: no budget"},
		{"a call waiting for approval parks the run, uncommitted", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(loop.TurnResult{Outcome: loop.OutcomeApproval, Approval: &agentfleet.ApprovalCall{Primitive: "spawn"}})}, "ack: park for approval"},
		{"a result is committed", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont)}, "commit"},

		// The worker ran out of its own resources: the turn goes back
		// uncounted, whatever step failed, and the run is not failed.
		{"a model connection the worker had no descriptor for sheds the turn", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: errModelFDs}}, "shed"},
		{"so does a sandbox process the worker could not start", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: errSandboxStart}}, "shed"},
		{"so does a turn run in place", facts{turn: turn(5), firstAttempt: true, inPlace: true, load: loaded(run(4, agentfleet.StatusRunning)), exec: &execFacts{err: errModelFDs}}, "shed"},
		{"so does a load out of descriptors", facts{turn: turn(4), load: &loadFacts{err: errStoreFDs}}, "shed"},
		{"so does a commit out of descriptors", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: &commitFacts{err: errStoreFDs}}, "shed"},
		{"a message that merely mentions descriptors is the run's failure", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: &execFacts{err: errors.New("script: too many open files")}}, "retry"},

		// The commit is in.
		{"a commit that lost its fence reads the run", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: &commitFacts{err: store.ErrConflict}}, "read"},
		{"then republishes what the winner owed", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: &commitFacts{err: store.ErrConflict}, read: &readFacts{run: run(4, agentfleet.StatusRunning)}},
			"ack: republish from 4, await, continue 4 retried"},
		{"or is done when a status change won", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: &commitFacts{err: store.ErrConflict}, read: &readFacts{run: run(3, agentfleet.StatusFailed)}}, "ack"},
		{"a failed commit is retried", facts{turn: turn(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: &commitFacts{err: errDown}}, "retry"},
		{"a committed turn publishes the next through the scheduler", facts{turn: turn(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: committed(run(4, agentfleet.StatusRunning))},
			"ack: send, await, continue 4"},
		{"a committed Direct turn runs the next in place", facts{turn: direct(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: committed(run(4, agentfleet.StatusRunning))},
			"ack: send, in place"},
		{"but not on a later attempt", facts{turn: direct(4), load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: committed(run(4, agentfleet.StatusRunning))},
			"ack: send, await, continue 4 direct"},
		{"nor while draining", facts{turn: direct(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont),
			commit: &commitFacts{change: store.RunChangeResult{Run: run(4, agentfleet.StatusRunning)}}}, "ack: send, await, continue 4 direct"},
		{"a committed turn of a run with a cancel requested ends it", facts{turn: direct(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont), commit: committed(cancelling(run(4, agentfleet.StatusRunning)))},
			"ack: send, await, cancel"},
		{"a turn that ended its session's run starts the next", facts{turn: turn(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont),
			commit: &commitFacts{change: store.RunChangeResult{Run: withSession(run(4, agentfleet.StatusCompleted)), SessionNext: &next}}}, "ack: send, await, session next r2"},
		{"a turn that parks its run for its children only publishes", facts{turn: turn(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont),
			commit: committed(parent(run(4, agentfleet.StatusWaitingChildren)))}, "ack: send, await"},
		{"a child's last turn settles its family", facts{turn: turn(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont),
			commit: committed(child(run(4, agentfleet.StatusCompleted)))}, "ack: send, await, family"},
		{"so does a parent's", facts{turn: turn(4), firstAttempt: true, load: loaded(run(3, agentfleet.StatusRunning)), exec: ran(cont),
			commit: committed(parent(run(4, agentfleet.StatusFailed)))}, "ack: send, await, family"},
		{"a redelivered last turn of a child settles its family again", facts{turn: turn(4), load: loaded(child(run(4, agentfleet.StatusCompleted)))},
			"ack: republish from 4, await, family"},
		{"a turn run in place continues through the scheduler", facts{turn: turn(5), firstAttempt: true, inPlace: true, load: loaded(run(4, agentfleet.StatusRunning)), exec: ran(cont), commit: committed(run(5, agentfleet.StatusRunning))},
			"ack: send, await, continue 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, describe(decide(c.f)))
		})
	}
}

// A tenant out of budget parks its run until budget returns, or fails
// it, by its policy.
func TestNoBudgetChange(t *testing.T) {
	t.Parallel()
	run := agentfleet.Run{ID: "r1", Tenant: "acme", Turn: 3, Status: agentfleet.StatusRunning}
	be := &agentfleet.BudgetExhaustedError{Tenant: "acme", Need: 500, Limit: 1000, Used: 800}
	park := noBudgetChange(run, be, agentfleet.ExhaustedQueue)
	require.Equal(t, agentfleet.StatusWaitingBudget, park.To)
	require.Equal(t, []agentfleet.RunStatus{agentfleet.StatusRunning}, park.From)
	require.Len(t, park.Events, 1)
	require.Equal(t, agentfleet.EventBudgetWaiting, park.Events[0].Type)
	require.Equal(t, "needs 500 tokens, 200 left of 1000", park.Events[0].Summary)

	fail := noBudgetChange(run, be, agentfleet.ExhaustedFail)
	require.Equal(t, agentfleet.StatusFailed, fail.To)
	require.Equal(t, be.Error(), fail.Error)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventError, agentfleet.EventDone}, []agentfleet.EventType{fail.Events[0].Type, fail.Events[1].Type})
}
