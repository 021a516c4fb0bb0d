package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Approvals: a script's call that the agent's approve rules cover asks
// approver where its approval stands (its own, by run, turn, call index
// and the call's digest, or a grant of its method and URL for the
// session). Not decided yet, the turn stops there and park parks the run
// in waiting_approval: the message is acked, nothing of the turn is
// committed, its model reply stays recorded. A decision (the API, or the
// dispatcher's expiry sweep) resumes the run and enqueues the same turn
// again, marked Retried so that it reuses the recorded reply; the script
// runs again and meets the call decided. A call that differs from the
// one decided (another body, say, built from a GET made again) has
// another digest, so it has no approval yet: it parks the run on a new
// one, and nothing is sent until that is decided.

// approver is the ApprovalFunc of turn of run.
func (w *Worker) approver(run agentfleet.Run, turn int) agentfleet.ApprovalFunc {
	return func(ctx context.Context, call agentfleet.ApprovalCall) (agentfleet.ApprovalState, string, error) {
		a, err := w.cfg.Store.ApprovalGetForCall(ctx, store.ApprovalGetForCallParams{
			RunID: run.ID, SessionID: run.SessionID, Tenant: run.Tenant, Turn: turn, Call: call,
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return agentfleet.ApprovalPending, "", nil
		case err != nil:
			return "", "", err
		}
		reason := a.Reason
		if a.Status == agentfleet.ApprovalDenied && reason == "" {
			reason = "no reason given (decided by " + a.DecidedBy + ")"
		}
		return a.Status, reason, nil
	}
}

// park parks run on the approval its turn stopped at. An approval decided
// meanwhile parks nothing: the turn is enqueued again at once. A cancel
// requested meanwhile ends the run instead.
func (w *Worker) park(a *attempt, run agentfleet.Run) (store.RunChangeResult, error) {
	ctx, res := a.ctx, a.f.exec.res
	agent, err := w.agents.get(ctx, run.Tenant, run.Agent, run.AgentVersion)
	if err != nil {
		return store.RunChangeResult{}, fmt.Errorf("load agent %q: %w", run.Agent, err)
	}
	got, err := w.cfg.Store.ApprovalRequest(ctx, store.ApprovalRequestParams{
		RunID: run.ID, Turn: res.Turn, Call: *res.Approval, Timeout: agent.ApprovalTimeout.D(), NotifyURL: agent.ApprovalCallbackURL,
	})
	if errors.Is(err, store.ErrConflict) {
		cur, rerr := w.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: run.ID})
		if rerr == nil && cur.Status == agentfleet.StatusRunning && cur.CancelRequested && cur.Turn == run.Turn {
			return w.change(a, effect{kind: effectChange, change: changeCancel, run: cur})
		}
		return store.RunChangeResult{}, errChangeLost
	}
	if err != nil {
		return store.RunChangeResult{}, fmt.Errorf("park run %s for approval: %w", run.ID, err)
	}
	if got.Parked {
		w.cfg.Metrics.approvalRequested(run.Tenant)
		return got.Change, nil
	}
	// Decided meanwhile: the same turn again, in the run's class. A
	// failed publish leaves the run running with no message, which the
	// stranded sweep finds.
	if err := w.owed(a).Repeat(ctx, got.Change.Run); err != nil {
		return store.RunChangeResult{}, err
	}
	return got.Change, nil
}
