// Metering: every model call is reserved against the tenant's budget
// before it is made, released when it fails and settled to what it used.

package loop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
)

// reserve holds budget for one model call; nil without a Meter.
func (e *Engine) reserve(ctx context.Context, run *agentfleet.Run, tokens int64) (*agentfleet.Reservation, error) {
	if e.cfg.Meter == nil {
		return nil, nil
	}
	res, err := e.cfg.Meter.Reserve(ctx, run.Tenant, run.ID, tokens)
	if err != nil {
		var be *agentfleet.BudgetExhaustedError
		if errors.As(err, &be) {
			return nil, err
		}
		return nil, fmt.Errorf("reserve %d tokens for run %s: %w", tokens, run.ID, err)
	}
	return &res, nil
}

// call calls the model; a failed call releases its reservation.
func (e *Engine) call(ctx context.Context, run *agentfleet.Run, req agentfleet.ModelRequest, res *agentfleet.Reservation) (agentfleet.ModelResponse, error) {
	return e.released(ctx, res, func() (agentfleet.ModelResponse, error) { return e.cfg.Model.Complete(ctx, req) })
}

// released makes a model call with call; a failed one releases res.
func (e *Engine) released(ctx context.Context, res *agentfleet.Reservation, call func() (agentfleet.ModelResponse, error)) (agentfleet.ModelResponse, error) {
	resp, err := call()
	if err == nil {
		return resp, nil
	}
	if res != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := e.cfg.Meter.Release(rctx, *res); rerr != nil {
			return resp, fmt.Errorf("model call: %w (and releasing its reservation: %v)", err, rerr)
		}
	}
	return resp, fmt.Errorf("model call: %w", err)
}

// release gives back a reservation nothing will charge; a failure only
// leaves it to expire (the keeper releases it).
func (e *Engine) release(ctx context.Context, res *agentfleet.Reservation) {
	if res == nil || e.cfg.Meter == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = e.cfg.Meter.Release(rctx, *res)
}

// settle charges a call's usage to its reservation. It must happen even
// when the turn's context was cancelled mid-call: the tokens were spent.
func (e *Engine) settle(ctx context.Context, run *agentfleet.Run, res *agentfleet.Reservation, resp agentfleet.ModelResponse) error {
	if res == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.cfg.Meter.Settle(sctx, *res, resp.Usage, resp.Model); err != nil {
		return fmt.Errorf("settle %d tokens for run %s: %w", resp.Usage.Total(), run.ID, err)
	}
	return nil
}

// meteredCall reserves budget, calls the model and settles the
// reservation to what the call used (the ai() sub-calls).
func (e *Engine) meteredCall(ctx context.Context, run *agentfleet.Run, req agentfleet.ModelRequest, tokens int64) (agentfleet.ModelResponse, error) {
	res, err := e.reserve(ctx, run, tokens)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	resp, err := e.call(ctx, run, req, res)
	if err != nil {
		return resp, err
	}
	return resp, e.settle(ctx, run, res, resp)
}
