package api

import (
	"context"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// runView is GET /v1/runs/{id}: the run, its usage with its children's
// rolled up.
type runView struct {
	agentfleet.Run
	Usage runUsage `json:"usage"`
	// Callback is the run's completion callback (callbacks.go).
	Callback *wire.CallbackView `json:"callback,omitempty"`
}

type runUsage struct {
	agentfleet.Usage
	// Children sums the usage of every run below this one.
	Children *agentfleet.Usage `json:"children,omitempty"`
}

func (s *Server) viewRun(ctx context.Context, run agentfleet.Run) (runView, error) {
	v := runView{Run: run, Usage: runUsage{Usage: run.Usage}}
	var err error
	if v.Callback, err = s.callbackView(ctx, run); err != nil {
		return v, err
	}
	if run.Children > 0 {
		u, err := s.cfg.Store.RunChildrenUsage(ctx, run.ID)
		if err != nil {
			return v, err
		}
		v.Usage.Children = &u
	}
	return v, nil
}
