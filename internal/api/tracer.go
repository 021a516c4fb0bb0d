package api

import (
	"context"

	"github.com/agentfleet/agentfleet"
)

// Tracer is what the API needs of the fleet's tracing.
type Tracer interface {
	// Admitted emits the span of a run admitted and returns the trace
	// context for its first turn's message.
	Admitted(ctx context.Context, run agentfleet.Run) string
	// EndRun emits the span of a run that ended.
	EndRun(ctx context.Context, run agentfleet.Run)
}

type noTracer struct{}

func (noTracer) Admitted(context.Context, agentfleet.Run) string { return "" }
func (noTracer) EndRun(context.Context, agentfleet.Run)          {}
