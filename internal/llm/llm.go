// Package llm owns the fleet's model clients: the Client seam every model
// sits behind, the conservative token estimate budgets reserve with, the
// model configuration read from the environment, and the two models that
// need no network: Scripted (a test fake that fails on unexpected calls)
// and Demo (the offline demo model `agentctl dev` runs with by default).
//
// The OpenAI-wire client lives in llm/openaiwire, the only importer of
// openai-go; New builds it from a Config, so code that wants "the
// configured model" needs only this package. An OpenAI-wire fake server
// for end-to-end tests and benchmarks lives in llm/fakeserver.
//
// This package knows nothing of turns, budgets or the sandbox. The turn
// engine declares the model interface it consumes; Client is shaped so
// that everything here satisfies it.
package llm

import (
	"context"

	"github.com/agentfleet/agentfleet"
)

// Client is a chat model.
type Client interface {
	// Complete returns the model's whole reply to req.
	Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error)
	// Stream delivers the reply to fn as it is produced: content deltas,
	// then one chunk with Done set carrying the whole response. It
	// returns that same response. An error from fn ends the call; a nil
	// fn makes Stream a Complete that streams on the wire.
	Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error)
}

// EstimateTokens estimates the prompt tokens of msgs, for budget
// reservations and for replies whose provider reported no usage.
//
// It is agentfleet.EstimateTokens, the fleet's one estimate: the budget
// reserves with it before a call, and the clients here charge with it when
// a provider reports no usage, so the two can never disagree. It is
// deliberately conservative, because an under-estimate lets a reservation
// admit a call the budget cannot pay for: it counts UTF-8 bytes (more than
// characters for any non-ASCII text) divided by three, rounded up, where
// tokenizers average about four bytes of English per token, plus four
// tokens per message for role and framing, where chat templates spend
// about three. Real usage replaces it whenever the provider reports some.
func EstimateTokens(msgs []agentfleet.ChatMessage) int64 {
	return agentfleet.EstimateTokens(msgs)
}
