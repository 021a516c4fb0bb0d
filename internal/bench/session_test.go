package bench_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bench"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// requireSession checks what a session bench reports on any fleet: every
// run of the session seen at the fake model with a prompt, and the carry
// run's six calls.
func requireSession(t *testing.T, rep *bench.Report, runs int) {
	t.Helper()
	f := rep.Figures.Session
	require.NotNil(t, f)
	require.Len(t, f.Runs, runs)
	for i, r := range f.Runs {
		require.Equal(t, i+1, r.Run)
		require.Equal(t, agentfleet.StatusCompleted, r.Status)
		require.Positive(t, r.FirstPromptChars, "run %d", r.Run)
		require.Positive(t, r.FirstPromptTokens, "run %d", r.Run)
		require.GreaterOrEqual(t, r.ModelCalls-r.SummaryCalls, rep.Parameters.Turns, "run %d: a call per turn", r.Run)
		require.Greater(t, r.PromptChars, r.FirstPromptChars, "run %d: its calls in all", r.Run)
		require.NotNil(t, r.PrefixMin, "run %d: two calls make a pair", r.Run)
		require.Greater(t, *r.PrefixMin, 0.0)
		require.LessOrEqual(t, *r.PrefixMin, *r.PrefixMean)
		require.LessOrEqual(t, *r.PrefixMean, 1.0)
	}
	require.Positive(t, f.FirstPromptGrowth)
	require.LessOrEqual(t, f.FirstPromptGrowth, bench.SessionGrowthBound)
	require.GreaterOrEqual(t, f.ModelCalls, runs*rep.Parameters.Turns)

	c := f.Carry
	require.NotNil(t, c)
	require.Equal(t, agentfleet.StatusCompleted, c.Status)
	require.Equal(t, "carried 200 items over 6 turns", c.Answer)
	require.Equal(t, bench.CarryTurns, c.ModelCalls-c.SummaryCalls, "the carry run made 6 calls")
	require.Len(t, c.CallPromptChars, c.ModelCalls)
	sum := 0
	for _, n := range c.CallPromptChars {
		require.Positive(t, n)
		sum += n
	}
	require.Equal(t, sum, c.PromptChars)
	require.Len(t, c.Prefixes, bench.CarryTurns-1)
	require.NotNil(t, c.PrefixMin)
	require.Greater(t, *c.PrefixMin, 0.0)
	require.LessOrEqual(t, *c.PrefixMin, 1.0)
	require.Equal(t, bench.CarryPromptCharsTarget, c.PromptCharsTarget)
}

func TestSession(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Session, Runs: 4, Warmup: 1})
	require.Equal(t, 2, rep.Parameters.Turns)
	require.Equal(t, 4, rep.Figures.Runs.Completed)
	requireSession(t, rep, 4)
}

func TestSessionSpawned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentctl and runs a fleet of processes")
	}
	dbURL, schema := pgtest.Schema(t)
	rep := run(t, bench.Config{Scenario: bench.Session, Runs: 3, Warmup: 1,
		Spawn: true, DatabaseURL: dbURL, Schema: schema, Executable: buildAgentctl(t)})
	require.Equal(t, "processes", rep.Parameters.Mode)
	requireSession(t, rep, 3)
}

func TestIsSummaryCall(t *testing.T) {
	msgs := func(system string) []agentfleet.ChatMessage {
		return []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}, {Role: agentfleet.RoleUser, Content: "summarize this"}}
	}
	require.True(t, bench.IsSummaryCall(msgs("Summarize the conversation below.")))
	require.True(t, bench.IsSummaryCall(msgs("You write a SUMMARY of earlier turns.")))
	require.True(t, bench.IsSummaryCall(msgs("Summaries only.")))
	require.False(t, bench.IsSummaryCall(msgs("You work by writing JavaScript.")), "the user message does not count")
	require.False(t, bench.IsSummaryCall([]agentfleet.ChatMessage{{Role: agentfleet.RoleUser, Content: "summarize"}}), "no system message")
}

func TestPrefixFractions(t *testing.T) {
	sys := agentfleet.ChatMessage{Role: agentfleet.RoleSystem, Content: "0123456789"}
	user := func(s string) agentfleet.ChatMessage {
		return agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: s}
	}
	a := []agentfleet.ChatMessage{sys, user("task")}
	grown := []agentfleet.ChatMessage{sys, user("task"), user("more")}
	changed := []agentfleet.ChatMessage{sys, user("TASK")}
	p := bench.PrefixFractions([][]agentfleet.ChatMessage{a, grown, a, changed})
	require.Len(t, p, 3)
	require.Equal(t, 1.0, p[0], "a prompt the next one extends is all prefix")
	// "system\x000123456789\x00user\x00task\x00" (28 bytes) is a's
	// prompt; the next drops grown's last message: a's 28 of grown's 38.
	require.InDelta(t, 28.0/38.0, p[1], 1e-9)
	// changed differs from a at the task's first byte, after 23.
	require.InDelta(t, 23.0/28.0, p[2], 1e-9)
	require.Empty(t, bench.PrefixFractions([][]agentfleet.ChatMessage{a}))
}

// The fake model plays the run's own message, the last in the prompt,
// however a session's earlier runs precede it: as turns of their own or
// folded into one message.
func TestSessionReplyPlaysTheLatestMessage(t *testing.T) {
	msg := func(role, content string) agentfleet.ChatMessage {
		return agentfleet.ChatMessage{Role: role, Content: content}
	}
	sys := msg(agentfleet.RoleSystem, "You work by writing JavaScript.")
	earlier := []agentfleet.ChatMessage{
		msg(agentfleet.RoleUser, "bench-chat tag message 0 of 2 turns: step a counter 2 times, then answer"),
		msg(agentfleet.RoleAssistant, "Step 1 of message 0.\n[script of turn 1 elided]"),
		msg(agentfleet.RoleUser, "Turn 1 ran."),
		msg(agentfleet.RoleAssistant, "Message 0 done."),
		msg(agentfleet.RoleUser, `answered "done 0 2"`),
	}
	folded := msg(agentfleet.RoleUser, "Earlier in this session:\nbench-chat tag message 0 of 2 turns: step a counter\nanswered done 0 2")
	task := msg(agentfleet.RoleUser, "bench-chat tag message 1 of 2 turns: step a counter 2 times, then answer\n\n(args on the first turn holds ...)")
	turn1 := []agentfleet.ChatMessage{msg(agentfleet.RoleAssistant, "Step 1 of message 1."), msg(agentfleet.RoleUser, "Turn 1 ran.")}
	for name, history := range map[string][]agentfleet.ChatMessage{
		"none": nil, "as turns": earlier, "folded": {folded},
	} {
		t.Run(name, func(t *testing.T) {
			first := append(append([]agentfleet.ChatMessage{sys}, history...), task)
			reply, ok := bench.ScriptedReply(first)
			require.True(t, ok)
			require.Contains(t, reply, "Step 1 of message 1.")
			require.Contains(t, reply, "args.message === 1", "it counts only its own message's state")
			reply, ok = bench.ScriptedReply(append(first, turn1...))
			require.True(t, ok)
			require.Contains(t, reply, "Message 1 done.")
			require.Contains(t, reply, "answer('done 1 '")
		})
	}
	_, ok := bench.ScriptedReply([]agentfleet.ChatMessage{sys, msg(agentfleet.RoleUser, "bench tag run 1 of 2 turns")})
	require.False(t, ok, "other scenarios' tasks are not the session's")
	reply, ok := bench.ScriptedReply([]agentfleet.ChatMessage{sys, msg(agentfleet.RoleUser, "bench-carry tag: 200 items over 6 turns")})
	require.True(t, ok)
	require.Contains(t, reply, "i < 200")
}

// A summary call is answered as one, though its prompt quotes the
// session's messages, and recorded as one.
func TestSummaryCallIsAnsweredAndRecordedAsOne(t *testing.T) {
	task := agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "bench-chat tag message 3 of 2 turns: step a counter 2 times, then answer"}
	reply, summary := bench.Serve([]agentfleet.ChatMessage{
		{Role: agentfleet.RoleSystem, Content: "Summarize the conversation so far for the assistant's later turns."}, task,
	})
	require.True(t, summary)
	require.Contains(t, reply, "Summary:")
	require.NotContains(t, reply, "```", "prose, not a turn's script")

	reply, summary = bench.Serve([]agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: "You work by writing JavaScript."}, task})
	require.False(t, summary)
	require.Contains(t, reply, "Step 1 of message 3.")
}
