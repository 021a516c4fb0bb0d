package loop_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// foldModel plays the agent and the summarizer: a summary call (told by
// the summarizer's system prompt) is answered "SUMMARY <n>: ..." or
// fails with failSummary; any other call gets reply.
type foldModel struct {
	mu          sync.Mutex
	reply       string
	failSummary error
	agent       []agentfleet.ModelRequest
	summaries   []agentfleet.ModelRequest
}

func (m *foldModel) Complete(_ context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if strings.Contains(req.Messages[0].Content, "running summary") {
		m.summaries = append(m.summaries, req)
		if m.failSummary != nil {
			return agentfleet.ModelResponse{}, m.failSummary
		}
		return agentfleet.ModelResponse{Content: fmt.Sprintf("SUMMARY %d: Ada asked about order 4411.", len(m.summaries)), Model: req.Model,
			Usage: agentfleet.Usage{PromptTokens: 300, CompletionTokens: 20}}, nil
	}
	m.agent = append(m.agent, req)
	return agentfleet.ModelResponse{Content: m.reply, Model: req.Model, Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 10}}, nil
}

func (m *foldModel) calls() (agent, summaries []agentfleet.ModelRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]agentfleet.ModelRequest(nil), m.agent...), append([]agentfleet.ModelRequest(nil), m.summaries...)
}

// foldBundle is an engine over a foldModel with a meter, a recorder and
// a journal.
type foldBundle struct {
	model   *foldModel
	engine  *loop.Engine
	meter   *memMeter
	journal *memJournal
}

func foldSetup(t *testing.T, m *foldModel) *foldBundle {
	t.Helper()
	b := &foldBundle{model: m, meter: &memMeter{}}
	b.journal = &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: b.meter}
	var err error
	b.engine, err = loop.New(loop.Config{Model: m, Sandbox: pool(t), Meter: b.meter, Recorder: &memRecorder{meter: b.meter},
		Journal: b.journal, DefaultModel: "worker-model"})
	require.NoError(t, err)
	return b
}

// longSession is n ended runs of session s1, each with a question of
// about size bytes marked Q<i>.
func longSession(n, size int) []loop.SessionRun {
	var out []loop.SessionRun
	for i := range n {
		q := fmt.Sprintf("Q%02d asks %s", i, strings.Repeat("q", size))
		out = append(out, earlierRun(fmt.Sprintf("r%02d", i), q, fmt.Sprintf("answer %02d", i)))
	}
	return out
}

func windowed(window int) agentfleet.Agent {
	return agentfleet.Agent{Name: "small", AgentSpec: agentfleet.AgentSpec{ContextWindow: window, Model: "small-model", Primitives: []string{}}}
}

func eventOf(evs []agentfleet.Event, typ agentfleet.EventType) *agentfleet.Event {
	for i := range evs {
		if evs[i].Type == typ {
			return &evs[i]
		}
	}
	return nil
}

// A session run whose history exceeds its agent's trigger compacts before
// its model call: the summary step is the turn's last, the prompt holds
// the summary and not the runs it covers, the summary calls are charged
// and counted in the turn's usage, and a compacted event says what was
// folded. The next turn replays the summary and calls no summarizer.
func TestTurnCompactsPastTheTrigger(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { log("ok"); return {n: 1}; }`)}
	b := foldSetup(t, m)
	session := longSession(10, 1200)
	run := agentfleet.Run{ID: "r10", Tenant: "acme", SessionID: "s1", Message: "Q10: and now?", Status: agentfleet.StatusRunning}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: windowed(4096), Session: session})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeContinue, res.Outcome)

	agent, summaries := m.calls()
	require.NotEmpty(t, summaries)
	require.Len(t, agent, 1)
	for _, s := range summaries {
		require.Equal(t, "small-model", s.Model, "summary_model defaults to the agent's model")
	}
	require.Contains(t, summaries[0].Messages[1].Content, "Q00 asks", "the oldest run goes to the summarizer first")
	last := summaries[len(summaries)-1].Messages[1].Content
	require.Contains(t, last, "user (this run's task): Q10: and now?", "the run's task is folded with the session's runs")

	require.Len(t, res.Steps, 3)
	step := res.Steps[2]
	require.Equal(t, agentfleet.StepSummary, step.Kind)
	require.Equal(t, 2, step.Index)
	require.Equal(t, 1, step.Turn)
	through, text := loop.ParseSummary(step)
	require.Zero(t, through, "it covers the earlier runs and the task, none of this run's turns")
	require.Equal(t, fmt.Sprintf("SUMMARY %d: Ada asked about order 4411.", len(summaries)), text)

	prompt := agent[0].Messages
	require.Equal(t, step.Content, prompt[1].Content, "the summary opens the history")
	all := contents(prompt[1:])
	for i := range 10 {
		require.NotContains(t, all, fmt.Sprintf("Q%02d asks", i), "covered by the summary")
	}
	require.True(t, strings.HasPrefix(prompt[len(prompt)-1].Content, "Q10: and now?"), "the task stays verbatim")
	require.LessOrEqual(t, agentfleet.EstimateTokens(prompt), int64(agentfleet.ProfileFor(4096).Budget))
	require.Equal(t, agentfleet.ProfileFor(4096).Reserve, agent[0].MaxTokens, "the profile's reserve caps the reply")

	summaryUsage := agentfleet.Usage{PromptTokens: 300 * int64(len(summaries)), CompletionTokens: 20 * int64(len(summaries))}
	require.Equal(t, summaryUsage, step.Usage)
	require.Equal(t, summaryUsage.Add(agentfleet.Usage{PromptTokens: 100, CompletionTokens: 10}), res.Usage, "the turn's usage counts the summary calls")
	require.Equal(t, res.Usage.Total(), b.meter.used, "and the tenant is charged for them")
	require.Zero(t, b.meter.reserved)
	ev := eventOf(res.Events, agentfleet.EventCompacted)
	require.NotNil(t, ev)
	require.Contains(t, ev.Summary, "folded 10 earlier run(s) of the session, the task into a summary")
	require.Nil(t, eventOf(res.Events, agentfleet.EventWarning))
	require.Nil(t, eventOf(res.Events, agentfleet.EventBudgetTrimmed), "the summary made room: nothing trimmed")

	// Turn 2 replays the checkpoint: no summary call, the same prefix.
	run.Turn, run.Args = res.Turn, res.Args
	res2, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: windowed(4096), Session: session, Steps: res.Steps})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeContinue, res2.Outcome)
	agent, again := m.calls()
	require.Len(t, again, len(summaries), "no summary call")
	require.Equal(t, agent[0].Messages, agent[1].Messages[:len(agent[0].Messages)], "turn 2's prompt starts with turn 1's")
	require.Len(t, res2.Steps, 2)
}

// Within one run (no session; its agent sets a window), the oldest turns
// fold once the turns outgrow the trigger: the summary names the last
// turn it covers, the recomposed prompt holds it and the turns after it,
// and not the turns it covers.
func TestTurnCompactsItsOwnTurns(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return {n: 2}; }`)}
	b := foldSetup(t, m)
	var steps []agentfleet.Step
	for k := 1; k <= 8; k++ {
		steps = append(steps,
			agentfleet.Step{Turn: k, Kind: agentfleet.StepModel, Content: fmt.Sprintf("Turn %d: look.\n```javascript\nfunction run(){ return %d; }\n```", k, k)},
			agentfleet.Step{Turn: k, Index: 1, Kind: agentfleet.StepObservation,
				Content: fmt.Sprintf("Turn %d ran.\nlog:\nOBS-%d %s\nreturned number (1 B)\n", k, k, strings.Repeat("w", 1200))})
	}
	run := agentfleet.Run{ID: "solo", Tenant: "acme", Message: "Look eight times.", Turn: 8, Status: agentfleet.StatusRunning}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: windowed(4096), Steps: steps})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeContinue, res.Outcome)

	summary := res.Steps[len(res.Steps)-1]
	require.Equal(t, agentfleet.StepSummary, summary.Kind)
	through, _ := loop.ParseSummary(summary)
	require.Positive(t, through)
	require.Less(t, through, 8, "the latest turn stays verbatim")
	agent, _ := m.calls()
	all := contents(agent[0].Messages)
	require.Contains(t, all, "[summary of the session through turn "+fmt.Sprint(through)+"]")
	for k := 1; k <= 8; k++ {
		if k <= through {
			require.NotContains(t, all, fmt.Sprintf("OBS-%d ", k), "turn %d is covered", k)
		} else {
			require.Contains(t, all, fmt.Sprintf("OBS-%d ", k), "turn %d stays", k)
		}
	}
	require.NotContains(t, all, "earlier turn(s) omitted", "the covered turns are not counted as missing")
	ev := eventOf(res.Events, agentfleet.EventCompacted)
	require.NotNil(t, ev)
	require.Contains(t, ev.Summary, fmt.Sprintf("the task, turns 1-%d", through))
}

// A summary call that fails (here: a summary_model no one serves) is a
// warning event naming the cause; the turn goes on with its prompt
// trimmed (budget_trimmed), and commits no summary.
func TestTurnCompactionFailsToTrimming(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return 1; }`),
		failSummary: &agentfleet.ModelUnavailableError{Model: "no-such-model", Reason: "no provider serves it"}}
	b := foldSetup(t, m)
	agentDef := windowed(2048)
	agentDef.SummaryModel = "no-such-model"
	run := agentfleet.Run{ID: "r10", Tenant: "acme", SessionID: "s1", Message: "And now?", Status: agentfleet.StatusRunning}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agentDef, Session: longSession(10, 600)})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeContinue, res.Outcome, "the run goes on")
	for _, s := range res.Steps {
		require.NotEqual(t, agentfleet.StepSummary, s.Kind)
	}
	agent, summaries := m.calls()
	require.Len(t, summaries, 1)
	require.Equal(t, "no-such-model", summaries[0].Model)
	require.Len(t, agent, 1)
	w := eventOf(res.Events, agentfleet.EventWarning)
	require.NotNil(t, w)
	require.Contains(t, w.Content, "model no-such-model")
	require.Contains(t, w.Content, "no provider serves it")
	trim := eventOf(res.Events, agentfleet.EventBudgetTrimmed)
	require.NotNil(t, trim)
	require.Contains(t, trim.Summary, fmt.Sprintf("to fit %d tokens", agentfleet.ProfileFor(2048).Budget))
	require.LessOrEqual(t, agentfleet.EstimateTokens(agent[0].Messages), int64(agentfleet.ProfileFor(2048).Budget))
	require.Nil(t, eventOf(res.Events, agentfleet.EventCompacted))
}

// A crash between the summary call and the commit: the turn run again
// (its reply recorded, its summary journaled) makes no summary call and
// charges nothing more, and commits the same summary with the same usage.
func TestTurnCompactionReplaysAfterACrash(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return 1; }`)}
	b := foldSetup(t, m)
	in := loop.TurnInput{Run: agentfleet.Run{ID: "r10", Tenant: "acme", SessionID: "s1", Message: "And now?", Status: agentfleet.StatusRunning},
		Agent: windowed(4096), Session: longSession(10, 1200), FirstAttempt: true}
	first, err := b.engine.Step(context.Background(), in)
	require.NoError(t, err)
	_, summaries := m.calls()
	require.NotEmpty(t, summaries)
	charged := b.meter.used
	// The worker died before committing first: the turn runs again.
	in.FirstAttempt = false
	again, err := b.engine.Step(context.Background(), in)
	require.NoError(t, err)
	agent, after := m.calls()
	require.Len(t, after, len(summaries), "the summary calls are not made again")
	require.Len(t, agent, 1, "nor the model call: its reply was recorded")
	require.Equal(t, charged, b.meter.used, "nothing is billed twice")
	require.Len(t, again.Steps, 3)
	require.Equal(t, agentfleet.StepSummary, again.Steps[2].Kind)
	require.Equal(t, first.Steps[2].Content, again.Steps[2].Content, "the same summary")
	require.Equal(t, first.Steps[2].Usage, again.Steps[2].Usage)
	require.Equal(t, first.Usage, again.Usage, "the run's usage counts the replayed calls")
	ev := eventOf(again.Events, agentfleet.EventCompacted)
	require.NotNil(t, ev)
	require.Contains(t, ev.Summary, "replayed from the journal")
}

// A run without a session whose agent sets no window never compacts,
// however long its history: it is trimmed to the budget as before.
func TestTurnWithoutSessionOrWindowDoesNotCompact(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return 1; }`)}
	b := foldSetup(t, m)
	var steps []agentfleet.Step
	for k := 1; k <= 15; k++ {
		steps = append(steps,
			agentfleet.Step{Turn: k, Kind: agentfleet.StepModel, Content: js(`function run(){ return 1; }`)},
			agentfleet.Step{Turn: k, Index: 1, Kind: agentfleet.StepObservation, Content: fmt.Sprintf("Turn %d ran.\nlog:\n%s\n", k, strings.Repeat("w", 6000))})
	}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{
		Run: agentfleet.Run{ID: "solo", Tenant: "acme", Message: "Go.", Turn: 15, Status: agentfleet.StatusRunning}, Steps: steps})
	require.NoError(t, err)
	_, summaries := m.calls()
	require.Empty(t, summaries)
	require.NotNil(t, eventOf(res.Events, agentfleet.EventBudgetTrimmed))
	require.Len(t, res.Steps, 2)
}

// A compaction that finds its turn committed elsewhere stops the turn
// (ErrStale) before its model call.
func TestTurnCompactionOfAStaleTurn(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return 1; }`)}
	meter := &memMeter{}
	eng, err := loop.New(loop.Config{Model: m, Sandbox: pool(t), Meter: meter,
		Journal: staleJournal{&memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}}})
	require.NoError(t, err)
	_, err = eng.Step(context.Background(), loop.TurnInput{
		Run:   agentfleet.Run{ID: "r10", Tenant: "acme", SessionID: "s1", Message: "And now?", Status: agentfleet.StatusRunning},
		Agent: windowed(4096), Session: longSession(10, 1200)})
	require.ErrorIs(t, err, loop.ErrStale)
	agent, summaries := m.calls()
	require.Len(t, summaries, 1)
	require.Empty(t, agent, "no model call for a turn someone else committed")
	require.Zero(t, meter.reserved)
}

// A session run whose agent sets no window compacts on the default
// profile: past its trigger, not before.
func TestSessionRunCompactsOnTheDefaultProfile(t *testing.T) {
	t.Parallel()
	m := &foldModel{reply: js(`function run(args) { return 1; }`)}
	b := foldSetup(t, m)
	run := agentfleet.Run{ID: "rx", Tenant: "acme", SessionID: "s1", Message: "And now?", Status: agentfleet.StatusRunning}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Session: longSession(20, 1200)})
	require.NoError(t, err)
	_, summaries := m.calls()
	require.Empty(t, summaries, "20 runs are under the default trigger")
	require.Len(t, res.Steps, 2)

	res, err = b.engine.Step(context.Background(), loop.TurnInput{Run: run, Session: longSession(60, 1200)})
	require.NoError(t, err)
	_, summaries = m.calls()
	require.NotEmpty(t, summaries, "60 are over it")
	require.Equal(t, "worker-model", summaries[0].Model, "no model named: the worker's")
	require.Equal(t, agentfleet.StepSummary, res.Steps[len(res.Steps)-1].Kind)
}
