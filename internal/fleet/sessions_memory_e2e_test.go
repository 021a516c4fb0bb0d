package fleet_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// memoryTurns plays a model that remembers through its session: "remember
// the word W" returns {word: W, count: 1} and then answers that it will;
// "what did I ask you to remember?" answers from the args it starts with.
// It reads only the prompt's last message, the one the turn answers.
func memoryTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	last := r.Messages[len(r.Messages)-1].Content
	switch {
	case strings.HasPrefix(last, "remember the word "):
		word := strings.Fields(strings.TrimPrefix(last, "remember the word "))[0]
		return "Noting it.\n```javascript\nfunction run(args) { log('noted'); return {word: " + strconv.Quote(word) + ", count: 1}; }\n```", usage, nil
	case strings.HasPrefix(last, "Turn 1 ran."):
		return "Done.\n```javascript\nfunction run(args) { answer('I will remember ' + args.word); }\n```", usage, nil
	case strings.HasPrefix(last, "what did I ask you to remember?"):
		return "From before.\n```javascript\nfunction run(args) { answer('you asked me to remember ' + args.word); }\n```", usage, nil
	}
	return "", usage, fmt.Errorf("no reply for a prompt ending %q", last)
}

// A follow-up run of a session sees, at the model, the earlier run's
// message, prose, logs and answer before its own task, and starts from
// the earlier run's final carried value; a run without a session sees
// only its own task. On SQLite and on PostgreSQL.
func TestFleetSessionRemembersEarlierRuns(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := fleetOptions{responder: memoryTurns}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			sessionRemembersEarlierRuns(t, setupFleetWith(t, o))
		})
	}
}

func sessionRemembersEarlierRuns(t *testing.T, f *testFleet) {
	first := f.wait(f.submit(wire.RunCreateRequest{Message: "remember the word kumquat", SessionID: "pr-42"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, first.Status, first.Error)
	require.JSONEq(t, `"I will remember kumquat"`, string(first.Answer))

	before := len(f.model.Received())
	second := f.wait(f.submit(wire.RunCreateRequest{Message: "what did I ask you to remember?", SessionID: "pr-42"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, second.Status, second.Error)
	require.JSONEq(t, `"you asked me to remember kumquat"`, string(second.Answer),
		"turn 1's args was the earlier run's final carried value")

	reqs := f.model.Received()[before:]
	require.Len(t, reqs, 1)
	msgs := reqs[0].Messages
	var prompt strings.Builder
	for _, m := range msgs[1:] {
		prompt.WriteString(m.Role + ": " + m.Content + "\n")
	}
	p := prompt.String()
	require.True(t, strings.HasPrefix(p, "user: remember the word kumquat\n"), "the earlier run's message opens the history:\n%s", p)
	require.Contains(t, p, "assistant: Noting it.\n[script of turn 1 elided]", "its prose, without its script")
	require.NotContains(t, p, "return {word:")
	require.Contains(t, p, "log:\nnoted", "its logs")
	require.Contains(t, p, "Answer: I will remember kumquat", "its answer")
	task := msgs[len(msgs)-1].Content
	require.True(t, strings.HasPrefix(task, "what did I ask you to remember?"), "the run's own task comes last")
	require.Contains(t, task, "what this session's previous run carried last: {count: number, word: string}")
	require.NotContains(t, p, `"kumquat"`, "the carried value itself stays out of the prompt")

	// A run without a session: nothing of the session, its own task only.
	before = len(f.model.Received())
	alone := f.wait(f.submit(wire.RunCreateRequest{Message: "remember the word fig"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, alone.Status, alone.Error)
	require.JSONEq(t, `"I will remember fig"`, string(alone.Answer))
	reqs = f.model.Received()[before:]
	require.Len(t, reqs, 2)
	require.Len(t, reqs[0].Messages, 2, "system prompt and task")
	require.Equal(t, "remember the word fig", reqs[0].Messages[1].Content)
	require.Equal(t, reqs[0].Messages, reqs[1].Messages[:2], "its second prompt starts with its first")
	require.Len(t, reqs[1].Messages, 4)
	for _, r := range reqs {
		for _, m := range r.Messages {
			require.NotContains(t, m.Content, "kumquat")
		}
	}
}
