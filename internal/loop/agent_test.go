package loop_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// An agent naming a model the worker cannot serve fails its run at once
// with the model client's reason, and pays nothing.
func TestStepModelNotServedFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	eng, err := loop.New(loop.Config{Model: llm.Demo{}, Sandbox: pool(t), Meter: b.meter, Recorder: b.rec})
	require.NoError(t, err)
	b.engine = eng
	out := b.drive(t, agentfleet.Run{Message: "t"}, agentfleet.Agent{Name: "writer", AgentSpec: agentfleet.AgentSpec{Model: "gpt-9"}})
	require.Equal(t, agentfleet.StatusFailed, out.run.Status)
	require.Contains(t, out.run.Error, `agent writer: model "gpt-9" is not served by this worker`)
	require.Len(t, out.results, 1, "not tried again")
	require.Zero(t, out.run.Usage.Total())
}

// An agent's max_tokens caps a run that sets none; a run's own wins.
func TestStepAgentMaxTokens(t *testing.T) {
	t.Parallel()
	agent := agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{MaxTokens: 100}}
	b := setup(t)
	out := b.drive(t, agentfleet.Run{Message: "t", Usage: agentfleet.Usage{PromptTokens: 100}}, agent)
	require.Equal(t, agentfleet.StatusFailed, out.run.Status)
	require.Contains(t, out.run.Error, "max_tokens of 100")

	b = setup(t, llm.Reply{Content: "done"})
	out = b.drive(t, agentfleet.Run{Message: "t", MaxTokens: 100_000, Usage: agentfleet.Usage{PromptTokens: 100}}, agent)
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
}

// The prompt declares the agent's primitives only, after its persona,
// and the sandbox refuses the others.
func TestStepAgentPrimitives(t *testing.T) {
	t.Parallel()
	agent := agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: "You are terse.", Primitives: []string{"parseUrl"}}}
	b := setup(t, llm.Reply{Content: js(`function run(){ return {u: parseUrl("https://a.example/x").hostname, f: typeof fetch}; }`),
		Check: func(r agentfleet.ModelRequest) error {
			sys := r.Messages[0].Content
			persona, api := strings.Index(sys, "You are terse."), strings.Index(sys, "declare function parseUrl")
			if persona < 0 || api < persona || strings.Contains(sys, "declare function fetch") || strings.Contains(sys, "ai(") {
				return fmt.Errorf("system prompt: %q", sys)
			}
			return nil
		}},
		llm.Reply{Content: js(`function run(args){ answer(args); }`)})
	out := b.drive(t, agentfleet.Run{Message: "t"}, agent)
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `{"u": "a.example", "f": "undefined"}`, string(out.run.Answer))
}
