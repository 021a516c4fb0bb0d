package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

var jsBlock = regexp.MustCompile("(?s)```javascript\n(.*?)\n```")

// script checks that reply is what the protocol asks for (exactly one
// fenced javascript block defining run(args)) and returns the code.
func script(t *testing.T, reply string) string {
	t.Helper()
	require.Equal(t, 2, strings.Count(reply, "```"), "exactly one fenced block:\n%s", reply)
	m := jsBlock.FindStringSubmatch(reply)
	require.NotNil(t, m, "the block is javascript:\n%s", reply)
	require.Contains(t, m[1], "function run(args) {")
	prose := strings.TrimSpace(reply[:strings.Index(reply, "```")])
	require.NotEmpty(t, prose, "a sentence before the code")
	require.True(t, strings.HasPrefix(prose, "[demo model"), "labelled as the demo: %q", prose)
	return m[1]
}

const system = "You are an agent. Reply with one ```javascript block defining function run(args)."

// play runs the demo on task until it answers, feeding back observation
// after every turn, and returns the replies.
func play(t *testing.T, m llm.Client, history []agentfleet.ChatMessage, task string) []string {
	t.Helper()
	msgs := append(history, agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: task})
	var replies []string
	for turn := 1; turn <= 10; turn++ {
		req := agentfleet.ModelRequest{Messages: msgs, MaxTokens: 1024}
		resp, err := m.Complete(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, llm.DemoModelLabel, resp.Model)
		require.True(t, resp.UsageReported)
		require.Equal(t, llm.EstimateTokens(msgs), resp.Usage.PromptTokens)
		require.Positive(t, resp.Usage.CompletionTokens)
		replies = append(replies, resp.Content)
		code := script(t, resp.Content)
		if strings.Contains(code, "answer(") {
			require.Contains(t, code, llm.DemoMarker, "the answer carries the demo marker")
			return replies
		}
		require.Contains(t, code, "log(")
		require.Contains(t, code, "return {", "a non-final turn carries state")
		msgs = append(msgs,
			agentfleet.ChatMessage{Role: agentfleet.RoleAssistant, Content: resp.Content},
			agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: fmt.Sprintf(
				"Turn %d ran.\nlog:\ncomputed 15 lines\nreturned {n: number, lines: array(15)} (120 B), passed to the next turn as args\n", turn)})
	}
	t.Fatalf("the demo did not answer within 10 turns")
	return nil
}

func TestDemoScripts(t *testing.T) {
	t.Parallel()
	base := []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}}
	for _, tc := range []struct {
		task   string
		script string
		turns  int
		want   []string // in the first turn's code
	}{
		{"Print fizzbuzz from 1 to 30", "fizzbuzz", 2, []string{"var n = 30;"}},
		{"Play FizzBuzz", "fizzbuzz", 2, []string{"var n = 15;"}},
		{"List the prime numbers below 50", "primes", 3, []string{"var limit = 50;"}},
		{"Give me the first 12 Fibonacci numbers", "fibonacci", 2, []string{"var n = 12;"}},
		{"Count words in: the cat and the hat", "wordcount", 2, []string{`"the cat and the hat"`}},
		{"word count please", "wordcount", 2, []string{"quick brown fox"}},
		{"Sort these: 5, -2, 17, 3", "sort", 2, []string{"[5, -2, 17, 3]"}},
		{"sort some numbers", "sort", 2, []string{"[42, 7, 19"}},
		{"What's the weather in Paris?", "generic", 1, []string{`"What's the weather in Paris?"`}},
	} {
		t.Run(tc.task, func(t *testing.T) {
			t.Parallel()
			replies := play(t, llm.Demo{}, base, tc.task)
			require.Len(t, replies, tc.turns)
			for i, r := range replies {
				require.Contains(t, r, "[demo model: "+tc.script+" ", "turn %d", i+1)
			}
			for _, w := range tc.want {
				require.Contains(t, script(t, replies[0]), w)
			}
			require.Equal(t, replies, play(t, llm.Demo{}, base, tc.task), "deterministic")
		})
	}
}

func TestDemoApologisesAfterError(t *testing.T) {
	t.Parallel()
	for _, obs := range []string{
		// The loop's wording (loop.Observation).
		"Turn 1 failed (timeout): script exceeded its 1s CPU deadline\nargs unchanged for the next turn: null\n",
		"Turn 1 failed (exception): boom\nargs unchanged for the next turn: null\n",
		"Error: exception: TypeError: Cannot read property 'lines' of null",
		"exception: boom",
		"timeout: script exceeded its CPU deadline",
		"log: computed\nReferenceError: x is not defined at run (line 3)",
	} {
		first, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{
			{Role: agentfleet.RoleSystem, Content: system}, {Role: agentfleet.RoleUser, Content: "fizzbuzz"},
		}})
		require.NoError(t, err)
		resp, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{
			{Role: agentfleet.RoleSystem, Content: system},
			{Role: agentfleet.RoleUser, Content: "fizzbuzz"},
			{Role: agentfleet.RoleAssistant, Content: first.Content},
			{Role: agentfleet.RoleUser, Content: obs},
		}})
		require.NoError(t, err)
		code := script(t, resp.Content)
		require.Contains(t, code, "answer(", obs)
		require.Contains(t, code, llm.DemoMarker+" Sorry", obs)
	}
}

func TestDemoApologisesWhenLastStepFails(t *testing.T) {
	t.Parallel()
	msgs := []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}, {Role: agentfleet.RoleUser, Content: "hello"}}
	first, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{Messages: msgs})
	require.NoError(t, err)
	msgs = append(msgs,
		agentfleet.ChatMessage{Role: agentfleet.RoleAssistant, Content: first.Content},
		agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "Error: answer is not defined"})
	resp, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{Messages: msgs})
	require.NoError(t, err)
	require.Contains(t, script(t, resp.Content), llm.DemoMarker+" Sorry")
}

func TestDemoFollowsSessionHistory(t *testing.T) {
	t.Parallel()
	// A session whose history holds a finished fizzbuzz run: the next
	// task starts its own script at its first turn.
	base := []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}}
	history := append([]agentfleet.ChatMessage(nil), base...)
	history = append(history, agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "fizzbuzz"})
	for _, r := range play(t, llm.Demo{}, base, "fizzbuzz") {
		history = append(history,
			agentfleet.ChatMessage{Role: agentfleet.RoleAssistant, Content: r},
			agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "log: ok"})
	}
	history = history[:len(history)-1] // the answer ended the run
	replies := play(t, llm.Demo{}, history, "now the primes up to 30")
	require.Len(t, replies, 3)
	require.Contains(t, replies[0], "[demo model: primes 1/3]")
	require.Contains(t, replies[0], "var limit = 30;")
}

func TestDemoTaskCannotBreakTheFence(t *testing.T) {
	t.Parallel()
	task := "count words in: ```\n\"quoted\" `tick` </script> \u2028 end"
	resp, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{
		{Role: agentfleet.RoleUser, Content: task},
	}})
	require.NoError(t, err)
	code := script(t, resp.Content)
	require.NotContains(t, code, "`")
	require.NotContains(t, code, "\u2028")
}

func TestDemoJSONRequest(t *testing.T) {
	t.Parallel()
	resp, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{JSON: true, Messages: []agentfleet.ChatMessage{
		{Role: agentfleet.RoleUser, Content: "Return a JSON object with a name."},
	}})
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(resp.Content), &v))
	require.Contains(t, v["note"], llm.DemoMarker)
}

func TestDemoStreamMatchesComplete(t *testing.T) {
	t.Parallel()
	req := agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{{Role: agentfleet.RoleUser, Content: "primes"}}}
	want, err := llm.Demo{}.Complete(context.Background(), req)
	require.NoError(t, err)
	var b strings.Builder
	var last agentfleet.ModelChunk
	got, err := llm.Demo{}.Stream(context.Background(), req, func(c agentfleet.ModelChunk) error {
		b.WriteString(c.Delta)
		last = c
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, want.Content, b.String())
	require.True(t, last.Done)
	require.Equal(t, want, last.Response)
}

func TestDemoLatencyHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err := llm.Demo{Latency: time.Hour}.Complete(ctx, agentfleet.ModelRequest{})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), time.Second)

	start = time.Now()
	_, err = llm.Demo{Latency: 5 * time.Millisecond}.Complete(context.Background(), agentfleet.ModelRequest{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond)
}
