package fleet_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// Usage the chat model reports: an agent call's and a summary call's.
var (
	chatUsage    = agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	summaryUsage = agentfleet.Usage{PromptTokens: 200, CompletionTokens: 20}
)

// chatModel plays a session of "tell me about topic N" runs, two turns
// each (a turn that logs notes, then the answer), and the compactor's
// summarizer. When hold is set, the first agent call whose prompt holds
// a summary waits (held closed) until release is closed.
type chatModel struct {
	mu        sync.Mutex
	summaries []fakeserver.Request
	hold      bool
	held      chan struct{}
	release   chan struct{}
}

func newChatModel(hold bool) *chatModel {
	return &chatModel{hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

var topicRE = regexp.MustCompile(`^tell me about topic (\d+)`)

func chatMessage(i int) string {
	return fmt.Sprintf("tell me about topic %02d, %s", i, strings.Repeat("in detail ", 25))
}

func isSummaryRequest(r fakeserver.Request) bool {
	return len(r.Messages) > 0 && r.Messages[0].Role == agentfleet.RoleSystem && strings.Contains(strings.ToLower(r.Messages[0].Content), "summar")
}

func (m *chatModel) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	if isSummaryRequest(r) {
		m.mu.Lock()
		m.summaries = append(m.summaries, r)
		n := len(m.summaries)
		m.mu.Unlock()
		return fmt.Sprintf("SUMMARY-%d: the user asked about several topics; each was answered.", n), summaryUsage, nil
	}
	// The run's own task is the last one in the prompt; its turn is one
	// more than the replies after it.
	task, k := -1, 1
	for j, msg := range r.Messages {
		if msg.Role != agentfleet.RoleUser {
			continue
		}
		if mt := topicRE.FindStringSubmatch(msg.Content); mt != nil {
			task, _ = strconv.Atoi(mt[1])
			k = 1
			for _, after := range r.Messages[j+1:] {
				if after.Role == agentfleet.RoleAssistant {
					k++
				}
			}
		}
	}
	if task < 0 {
		return "", chatUsage, fmt.Errorf("no task in the prompt")
	}
	if strings.Contains(r.Messages[1].Content, "[summary of the session through turn ") {
		m.mu.Lock()
		first := m.hold
		m.hold = false
		m.mu.Unlock()
		if first {
			close(m.held)
			<-m.release
		}
	}
	if k == 1 {
		return fmt.Sprintf("Looking into topic %02d.\n```javascript\nfunction run(args) { log(%q); return {topic: %d}; }\n```",
			task, fmt.Sprintf("notes on topic %02d: %s", task, strings.Repeat("fact ", 30)), task), chatUsage, nil
	}
	return fmt.Sprintf("Topic %02d done.\n```javascript\nfunction run(args) { answer('about topic ' + args.topic); }\n```", task), chatUsage, nil
}

func (m *chatModel) summaryRequests() []fakeserver.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fakeserver.Request(nil), m.summaries...)
}

// firstPrompt is the first agent call of the run whose task is topic i.
func firstPrompt(t *testing.T, reqs []fakeserver.Request, i int) []agentfleet.ChatMessage {
	t.Helper()
	want := fmt.Sprintf("tell me about topic %02d", i)
	for _, r := range reqs {
		if isSummaryRequest(r) {
			continue
		}
		last := r.Messages[len(r.Messages)-1]
		if last.Role == agentfleet.RoleUser && strings.HasPrefix(last.Content, want) {
			return r.Messages
		}
	}
	t.Fatalf("no first prompt of topic %02d", i)
	return nil
}

// summaryStepsOf is the summary steps in run id's trace.
func summaryStepsOf(t *testing.T, f *testFleet, id string) []agentfleet.Step {
	t.Helper()
	trace, err := f.tenant.RunSteps(f.ctx, id, -1)
	require.NoError(t, err)
	var out []agentfleet.Step
	for _, s := range trace.Steps {
		if s.Kind == agentfleet.StepSummary {
			out = append(out, s)
		}
	}
	return out
}

// billed is the tenant's usage as billed, in all.
func billed(t *testing.T, f *testFleet) (agentfleet.Usage, int64) {
	t.Helper()
	rows, err := f.store.UsageList(f.ctx, store.UsageListParams{Tenant: "acme", GroupBy: "run"})
	require.NoError(t, err)
	var u agentfleet.Usage
	var calls int64
	for _, r := range rows {
		u = u.Add(r.Usage)
		calls += r.Calls
	}
	return u, calls
}

// A session of an agent with a small context_window: its history folds
// into summary steps as it grows; a later run's first prompt holds the
// summary and not the runs it covers; summary calls are billed to the
// tenant and counted in the runs' usage. On SQLite and on PostgreSQL.
func TestFleetSessionCompacts(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			m := newChatModel(false)
			o := fleetOptions{responder: m.respond}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			sessionCompacts(t, setupFleetWith(t, o), m)
		})
	}
}

func sessionCompacts(t *testing.T, f *testFleet, m *chatModel) {
	f.putAgent("chat", map[string]any{"context_window": 2048})
	const runs = 30
	var ended []agentfleet.Run
	var summarized []int // the runs (0-based) holding a summary step
	for i := range runs {
		run := f.wait(f.submit(wire.RunCreateRequest{Message: chatMessage(i), Agent: "chat", SessionID: "conv-1"}).ID, 30*time.Second)
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d: %s", i, run.Error)
		require.JSONEq(t, strconv.Quote(fmt.Sprintf("about topic %d", i)), string(run.Answer))
		ended = append(ended, run)
		if len(summaryStepsOf(t, f, run.ID)) > 0 {
			summarized = append(summarized, i)
		}
	}
	require.NotEmpty(t, summarized, "a session of %d runs on a 2,048-token window compacts", runs)
	sums := m.summaryRequests()
	require.NotEmpty(t, sums)

	reqs := f.model.Received()
	require.GreaterOrEqual(t, len(summarized), 2, "the session folds again as it grows: %v", summarized)
	last := firstPrompt(t, reqs, runs-1)
	b, err := json.Marshal(last)
	require.NoError(t, err)
	require.Contains(t, string(b), "[summary of the session through turn ", "the 30th run replays a summary")
	for i := range summarized[len(summarized)-1] {
		require.NotContains(t, string(b), fmt.Sprintf("tell me about topic %02d", i), "the 30th run does not see run %d, which a summary covers", i)
	}
	require.LessOrEqual(t, len(b), 2*len(mustJSON(t, firstPrompt(t, reqs, 0))), "the 30th run's first prompt is at most twice the first's")

	// The first run after the first summary: its first prompt opens with
	// the summary, and holds nothing of the runs before the one that
	// made it.
	s := summarized[0]
	require.Less(t, s, runs-1, "a run follows the first summary")
	steps := summaryStepsOf(t, f, ended[s].ID)
	prompt := firstPrompt(t, reqs, s+1)
	require.Equal(t, agentfleet.RoleUser, prompt[1].Role)
	require.Equal(t, steps[len(steps)-1].Content, prompt[1].Content, "the summary opens the history")
	require.True(t, strings.HasPrefix(prompt[1].Content, "[summary of the session through turn "))
	var all strings.Builder
	for _, msg := range prompt[1:] {
		all.WriteString(msg.Content + "\n")
	}
	for i := range s {
		require.NotContains(t, all.String(), fmt.Sprintf("topic %02d", i), "run %d is covered by the summary", i)
	}
	require.Contains(t, all.String(), fmt.Sprintf("tell me about topic %02d", s+1), "its own task")
	// What the summarizer was given: the covered runs' messages.
	require.Contains(t, sums[0].Messages[1].Content, "tell me about topic 00")

	// Billed: every call once, the summary calls too, and the runs'
	// usage is what was billed.
	var runUsage agentfleet.Usage
	for _, r := range ended {
		runUsage = runUsage.Add(r.Usage)
	}
	agentCalls := len(reqs) - len(sums)
	want := agentfleet.Usage{
		PromptTokens:     int64(agentCalls)*chatUsage.PromptTokens + int64(len(sums))*summaryUsage.PromptTokens,
		CompletionTokens: int64(agentCalls)*chatUsage.CompletionTokens + int64(len(sums))*summaryUsage.CompletionTokens,
	}
	u, calls := billed(t, f)
	require.Equal(t, want, u, "the tenant is billed the summary calls")
	require.EqualValues(t, len(reqs), calls)
	require.Equal(t, want, runUsage, "the runs' usage counts them")
	evs := f.events(ended[s].ID)
	compacted := 0
	for _, ev := range evs {
		if ev.Type == agentfleet.EventCompacted {
			compacted++
		}
		require.NotEqual(t, agentfleet.EventWarning, ev.Type, ev.Content)
	}
	require.Equal(t, 1, compacted)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// A summary_model the provider does not serve fails the compaction, not
// the run: each run that would fold warns, naming the summarizer's
// failure, and goes on trimmed (budget_trimmed); no summary is stored. On
// SQLite and on PostgreSQL.
func TestFleetSessionSummaryFailureTrims(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			m := newChatModel(false)
			responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
				if isSummaryRequest(r) && r.Model == "gone-model" {
					return "", agentfleet.Usage{}, &fakeserver.StatusError{Status: http.StatusNotFound, Message: "The model `gone-model` does not exist"}
				}
				return m.respond(r)
			}
			o := fleetOptions{responder: responder}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			f := setupFleetWith(t, o)
			f.putAgent("chat", map[string]any{"context_window": 2048, "summary_model": "gone-model"})
			warned, trimmed := 0, 0
			for i := range 14 {
				run := f.wait(f.submit(wire.RunCreateRequest{Message: chatMessage(i), Agent: "chat", SessionID: "conv-2"}).ID, 60*time.Second)
				require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d: %s", i, run.Error)
				require.Empty(t, summaryStepsOf(t, f, run.ID), "no summary is stored")
				for _, ev := range f.events(run.ID) {
					switch ev.Type {
					case agentfleet.EventWarning:
						warned++
						require.Contains(t, ev.Content+ev.Summary, "gone-model")
					case agentfleet.EventBudgetTrimmed:
						trimmed++
					}
				}
			}
			require.Positive(t, warned, "the failed compaction warns")
			require.Positive(t, trimmed, "and the history is trimmed instead")
		})
	}
}

// A worker that dies between a summary call and its turn's commit: the
// turn runs again on another worker, replays the journaled summary (no
// second summary call, no second charge) and commits it once.
func TestFleetSessionCompactionSurvivesACrash(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			m := newChatModel(true)
			o := fleetOptions{responder: m.respond, workers: 1}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			compactionSurvivesACrash(t, setupFleetWith(t, o), m)
		})
	}
}

func compactionSurvivesACrash(t *testing.T, f *testFleet, m *chatModel) {
	f.putAgent("chat", map[string]any{"context_window": 2048})
	var ended []agentfleet.Run
	crashed := ""
	for i := 0; crashed == "" && i < 12; i++ {
		id := f.submit(wire.RunCreateRequest{Message: chatMessage(i), Agent: "chat", SessionID: "conv-1"}).ID
		done := make(chan agentfleet.Run, 1)
		go func() {
			run, _ := f.tenant.Wait(f.ctx, id)
			done <- run
		}()
		select {
		case run := <-done:
			require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d: %s", i, run.Error)
			ended = append(ended, run)
			continue
		case <-m.held:
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d did not end", i)
		}
		// The summary call is journaled; the model call after it is in
		// flight: the worker dies before the turn commits.
		require.Len(t, m.summaryRequests(), 1)
		f.crashWorker(0)
		close(m.release)
		f.startWorker()
		run := <-done
		require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
		ended = append(ended, run)
		crashed = id
	}
	require.NotEmpty(t, crashed, "a compaction happened")

	sums := m.summaryRequests()
	require.Len(t, sums, 1, "the summary call was made once")
	steps := summaryStepsOf(t, f, crashed)
	require.Len(t, steps, 1, "and its summary committed once")
	require.Contains(t, steps[0].Content, "SUMMARY-1:")
	var run agentfleet.Run
	for _, r := range ended {
		if r.ID == crashed {
			run = r
		}
	}
	rows, err := f.store.UsageList(f.ctx, store.UsageListParams{Tenant: "acme", RunID: crashed, GroupBy: "run"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	// Two turns' replies (the one in flight at the crash was never
	// received, so never billed) and the summary call, each once.
	require.EqualValues(t, 3, rows[0].Calls, "billed once each")
	require.Equal(t, chatUsage.Add(chatUsage).Add(summaryUsage), rows[0].Usage)
	require.Equal(t, rows[0].Usage, run.Usage, "the run's usage is what was billed")
	var compacted []string
	for _, ev := range f.events(crashed) {
		if ev.Type == agentfleet.EventCompacted {
			compacted = append(compacted, ev.Summary)
		}
	}
	require.Len(t, compacted, 1, "the committed attempt's event")
	require.Contains(t, compacted[0], "replayed from the journal")
}
