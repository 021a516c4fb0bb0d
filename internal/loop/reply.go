// Reply recording: a turn's model reply is recorded (fenced by the turn
// number) before its script runs, and a later attempt of the turn reuses
// it instead of paying the model again.

package loop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
)

// reply returns the turn's model reply: the recorded one when an earlier
// attempt of this turn got that far, otherwise a fresh, metered call that
// is recorded before anything executes. stop is set when the turn ends
// without a reply (no budget, run over its token cap).
func (t *turn) reply(ctx context.Context, msgs []agentfleet.ChatMessage) (Reply, *TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	if rec := cfg.Recorder; rec != nil && !t.in.FirstAttempt {
		r, ok, err := rec.RecordedReply(ctx, run.ID, t.n)
		if err != nil {
			return Reply{}, nil, fmt.Errorf("load recorded reply of turn %d: %w", t.n, err)
		}
		if ok {
			return r, nil, nil
		}
	}
	reserve := 0
	if w := t.in.Agent.ContextWindow; w > 0 {
		reserve = agentfleet.ProfileFor(w).Reserve
	}
	maxCompletion := int64(firstPositive(t.in.Agent.MaxCompletionTokens, reserve, cfg.MaxCompletionTokens))
	prompt := agentfleet.EstimateTokens(msgs)
	if run.MaxTokens > 0 {
		// The turn's summary calls count against the run's cap too.
		left := run.MaxTokens - run.Usage.Total() - t.res.Usage.Total() - prompt
		if left < 1 {
			r := t.fail(fmt.Sprintf("run's max_tokens (%d) leaves no room for the next call: %d used, prompt about %d",
				run.MaxTokens, run.Usage.Total(), prompt))
			return Reply{}, &r, nil
		}
		maxCompletion = min(maxCompletion, left)
	}
	modelName := firstNonEmpty(t.in.Agent.Model, cfg.DefaultModel)
	req := agentfleet.ModelRequest{Model: modelName, Messages: msgs, MaxTokens: int(maxCompletion)}
	var res *agentfleet.Reservation
	var err error
	if t.in.TenantUnlimited && cfg.Meter != nil {
		r := cfg.Meter.ReserveUnlimited(run.Tenant, run.ID, prompt+maxCompletion)
		res = &r
	} else {
		res, err = t.e.reserve(ctx, run, prompt+maxCompletion)
	}
	var be *agentfleet.BudgetExhaustedError
	if errors.As(err, &be) {
		r := TurnResult{Turn: t.n, Outcome: OutcomeNoBudget, Status: run.Status, Budget: be}
		return Reply{}, &r, nil
	}
	if err != nil {
		return Reply{}, nil, err
	}
	resp, err := t.modelCall(ctx, req, res)
	var unavailable *agentfleet.ModelUnavailableError
	if errors.As(err, &unavailable) {
		r := t.fail(fmt.Sprintf("agent %s: %v", t.in.Agent.Name, unavailable))
		return Reply{}, &r, nil
	}
	if err != nil {
		return Reply{}, nil, err
	}
	r := Reply{RunID: run.ID, Turn: t.n, Content: resp.Content, Model: resp.Model, Usage: resp.Usage, UsageReported: resp.UsageReported}
	if cfg.Recorder == nil {
		return r, nil, t.e.settle(ctx, run, res, resp)
	}
	got, charged, err := t.e.record(ctx, r, res)
	if !charged {
		// The reply was not recorded by this call (another attempt
		// got there first, or the turn is stale), or the charge did
		// not go with it: the tokens were spent all the same.
		if serr := t.e.settle(ctx, run, res, resp); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return Reply{}, nil, fmt.Errorf("record reply of turn %d: %w", t.n, err)
	}
	// Another attempt may have recorded first; its reply is the one this
	// turn executes, so every attempt runs the same code.
	return got, nil, nil
}

// record records a reply the model gave, and charges res with it, trying
// again while the store fails (retryRecord).
func (e *Engine) record(ctx context.Context, r Reply, res *agentfleet.Reservation) (got Reply, charged bool, err error) {
	err = e.retryRecord(ctx, func() error {
		var err error
		got, _, charged, err = e.cfg.Recorder.RecordReply(ctx, r, res)
		return err
	})
	return got, charged, err
}

// retryRecord calls write until it succeeds, for up to RecordRetryFor or
// until ctx ends, backing off from 50ms to 1s. ErrStale ends it at once
// (the turn is someone else's now), and so does ErrRejected (the store
// will refuse the same record again).
func (e *Engine) retryRecord(ctx context.Context, write func() error) error {
	const firstDelay, maxDelay = 50 * time.Millisecond, time.Second
	// Real time, as the waits below are: Config.Now stamps what a turn
	// records and may be a test's frozen clock.
	giveUp := time.Now().Add(e.cfg.RecordRetryFor)
	for delay, tries := firstDelay, 1; ; delay, tries = min(2*delay, maxDelay), tries+1 {
		err := write()
		if err == nil || errors.Is(err, ErrStale) || errors.Is(err, ErrRejected) {
			return err
		}
		if ctx.Err() != nil || time.Now().Add(delay).After(giveUp) {
			return fmt.Errorf("%w (%d tries)", err, tries)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%d tries)", err, tries)
		case <-time.After(delay):
		}
	}
}
