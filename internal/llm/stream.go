package llm

import (
	"context"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// streamText delivers an already complete reply to fn the way a provider
// streams one: content in line-sized deltas, then the Done chunk. The
// offline models use it so that streaming consumers are exercised without
// a network.
func streamText(ctx context.Context, resp agentfleet.ModelResponse, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if fn == nil {
		return resp, ctx.Err()
	}
	for _, piece := range strings.SplitAfter(resp.Content, "\n") {
		if piece == "" {
			continue
		}
		if err := ctx.Err(); err != nil {
			return resp, err
		}
		if err := fn(agentfleet.ModelChunk{Delta: piece}); err != nil {
			return resp, err
		}
	}
	if err := fn(agentfleet.ModelChunk{Done: true, Response: resp}); err != nil {
		return resp, err
	}
	return resp, nil
}
