package llm_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	msg := func(s string) agentfleet.ChatMessage {
		return agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: s}
	}
	for _, msgs := range [][]agentfleet.ChatMessage{
		nil,
		{msg("")},
		{msg("abcde"), msg("日本語")},
	} {
		require.Equal(t, agentfleet.EstimateTokens(msgs), llm.EstimateTokens(msgs), "one estimate for the whole fleet")
	}
	// Real tokenizers count 10 tokens for this sentence (cl100k, o200k)
	// plus about 3 for the message framing: the estimate must not be
	// below.
	require.GreaterOrEqual(t, llm.EstimateTokens([]agentfleet.ChatMessage{msg("The quick brown fox jumps over the lazy dog.")}), int64(13))
	require.Greater(t, llm.EstimateTokens([]agentfleet.ChatMessage{msg("a"), msg("a")}), llm.EstimateTokens([]agentfleet.ChatMessage{msg("aa")}),
		"every message costs its framing")
}
