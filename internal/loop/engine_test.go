package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
)

var shared struct {
	once sync.Once
	pool *sandbox.Pool
	err  error
}

// TestMain closes the sandbox pool the tests share. The test binary is
// also the sandbox process (see package sandbox).
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	os.Exit(code)
}

func pool(tb testing.TB) *sandbox.Pool {
	tb.Helper()
	shared.once.Do(func() {
		shared.pool, shared.err = sandbox.New(sandbox.Config{PoolSize: 4, Limits: sandbox.Limits{CPUTime: 2 * time.Second}})
	})
	require.NoError(tb, shared.err)
	return shared.pool
}

// memRecorder is an in-memory loop.Recorder.
type memRecorder struct {
	mu      sync.Mutex
	replies map[string]loop.Reply
	meter   *memMeter
	charged int
	// RecordReply fails its next failNext calls with failErr, as a store
	// that is away does; records counts its calls.
	failNext int
	failErr  error
	records  int
}

func (r *memRecorder) key(run string, turn int) string { return fmt.Sprintf("%s/%d", run, turn) }

func (r *memRecorder) RecordedReply(_ context.Context, runID string, turn int) (loop.Reply, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.replies[r.key(runID, turn)]
	return rep, ok, nil
}

// RecordReply records; when given a reservation and a meter it charges
// the reply's usage to it, as the store does in the same transaction.
func (r *memRecorder) RecordReply(ctx context.Context, rep loop.Reply, charge *agentfleet.Reservation) (loop.Reply, bool, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records++
	if r.failNext > 0 {
		r.failNext--
		return loop.Reply{}, false, false, r.failErr
	}
	if r.replies == nil {
		r.replies = map[string]loop.Reply{}
	}
	if old, ok := r.replies[r.key(rep.RunID, rep.Turn)]; ok {
		return old, true, false, nil
	}
	r.replies[r.key(rep.RunID, rep.Turn)] = rep
	if charge != nil && r.meter != nil {
		if err := r.meter.Settle(ctx, *charge, rep.Usage, rep.Model); err != nil {
			return rep, false, false, nil
		}
		r.charged++
		return rep, false, true, nil
	}
	return rep, false, false, nil
}

// memMeter is an in-memory budget: a limit on used + reserved.
type memMeter struct {
	mu       sync.Mutex
	limit    int64
	used     int64
	reserved int64
	reserves []int64
	unheld   int // ReserveUnlimited calls
	next     int
}

func (m *memMeter) Reserve(_ context.Context, tenant, runID string, tokens int64) (agentfleet.Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.limit > 0 && m.used+m.reserved+tokens > m.limit {
		return agentfleet.Reservation{}, &agentfleet.BudgetExhaustedError{Tenant: tenant, Need: tokens, Limit: m.limit, Used: m.used, Reserved: m.reserved}
	}
	m.next++
	m.reserved += tokens
	m.reserves = append(m.reserves, tokens)
	return agentfleet.Reservation{ID: fmt.Sprint(m.next), Tenant: tenant, RunID: runID, Tokens: tokens}, nil
}

func (m *memMeter) ReserveUnlimited(tenant, runID string, tokens int64) agentfleet.Reservation {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unheld++
	return agentfleet.Reservation{Tenant: tenant, RunID: runID, Tokens: tokens}
}

func (m *memMeter) Settle(_ context.Context, res agentfleet.Reservation, usage agentfleet.Usage, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if res.ID != "" { // an empty ID holds nothing (an unlimited tenant's)
		m.reserved -= res.Tokens
	}
	m.used += usage.Total()
	return nil
}

func (m *memMeter) Release(_ context.Context, res agentfleet.Reservation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reserved -= res.Tokens
	return nil
}

type bundle struct {
	model  *llm.Scripted
	engine *loop.Engine
	meter  *memMeter
	rec    *memRecorder
}

func setup(t *testing.T, replies ...llm.Reply) *bundle {
	t.Helper()
	b := &bundle{model: llm.NewScripted(replies...), meter: &memMeter{}}
	b.rec = &memRecorder{meter: b.meter}
	var err error
	b.engine, err = loop.New(loop.Config{Model: b.model, Sandbox: pool(t), Meter: b.meter, Recorder: b.rec})
	require.NoError(t, err)
	t.Cleanup(func() { b.model.AssertDone(t) })
	return b
}

// outcome is a run driven to its end in memory, as a worker and the store
// would drive it turn by turn.
type outcome struct {
	run     agentfleet.Run
	events  []agentfleet.Event
	results []loop.TurnResult
}

func (b *bundle) drive(t *testing.T, run agentfleet.Run, agent agentfleet.Agent) outcome {
	t.Helper()
	if run.ID == "" {
		run.ID = "run-1"
	}
	run.Tenant, run.Status = "acme", agentfleet.StatusRunning
	var out outcome
	var steps []agentfleet.Step
	for range 50 {
		res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Steps: steps})
		require.NoError(t, err)
		out.results = append(out.results, res)
		out.events = append(out.events, res.Events...)
		if res.Outcome == loop.OutcomeNoBudget {
			break
		}
		run.Turn, run.Args, run.Status = res.Turn, res.Args, res.Status
		run.Usage = run.Usage.Add(res.Usage)
		run.DataBytesCarried += res.DataBytesCarried
		run.Answer, run.Error = res.Answer, res.Error
		steps = append(steps, res.Steps...)
		if res.Outcome == loop.OutcomeFinished {
			break
		}
	}
	out.run = run
	return out
}

func js(body string) string {
	return "Here goes.\n```javascript\n" + body + "\n```\nThat should do it."
}

func eventTypes(evs []agentfleet.Event) []agentfleet.EventType {
	var out []agentfleet.EventType
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func TestStepCarriesValuesButShowsOnlyTheirShape(t *testing.T) {
	t.Parallel()
	var second, third agentfleet.ModelRequest
	b := setup(t,
		llm.Reply{Content: js(`function run(args) {
			var items = [];
			for (var i = 0; i < 200; i++) items.push({id: i, name: "item" + i, price: i * 1.5, tags: ["sec" + "retvalue", "b"]});
			log("made " + items.length);
			return {items: items};
		}`), Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}},
		llm.Reply{Content: js(`function run(args) { log("count=" + args.items.length + " last=" + args.items[199].name); return {total: args.items.length}; }`),
			Check: func(r agentfleet.ModelRequest) error { second = r; return nil }},
		llm.Reply{Content: js(`function run(args) { answer({total: args.total, ok: true}); }`),
			Check: func(r agentfleet.ModelRequest) error { third = r; return nil }},
	)
	out := b.drive(t, agentfleet.Run{Message: "make items"}, agentfleet.Agent{Name: "default"})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `{"total":200,"ok":true}`, string(out.run.Answer))
	require.Equal(t, 3, out.run.Turn)

	prompt2 := second.Messages[len(second.Messages)-1].Content
	require.Contains(t, prompt2, "made 200", "the model sees its own log")
	require.Contains(t, prompt2, "{items: {id: number, name: string, price: number, tags: string[2]}[200]}", "and the shape of what it returned")
	for _, m := range second.Messages {
		require.NotContains(t, m.Content, "secretvalue", "carried values never enter the prompt")
		require.NotContains(t, m.Content, "item199")
	}
	require.Contains(t, third.Messages[len(third.Messages)-1].Content, "count=200 last=item199", "the next turn read the carried value in full")
	// A script that ran is elided from every later prompt, so each
	// prompt starts with the one before it.
	require.Contains(t, third.Messages[2].Content, "[script of turn 1 elided]")
	require.NotContains(t, third.Messages[2].Content, "items.push")
	require.Contains(t, third.Messages[4].Content, "[script of turn 2 elided]")
	require.Equal(t, second.Messages, third.Messages[:len(second.Messages)])
	require.Greater(t, out.run.DataBytesCarried, int64(10_000), "200 objects were kept out of the prompt")
	require.Equal(t, []agentfleet.EventType{
		"started", "user", "model_call", "execute_js", "log", "execute_js_result", "data_update",
		"model_call", "execute_js", "log", "execute_js_result", "data_update",
		"model_call", "execute_js", "execute_js_result", "response", "done",
	}, eventTypes(out.events))
	require.Equal(t, &agentfleet.Tokens{Prompt: 10, Completion: 5}, out.events[2].Tokens)
}

func TestStepReportsEventsAsTheyHappen(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ log("working"); ai("x"); return {ok: true} }`)}, llm.Reply{Content: "sub"})
	var live []agentfleet.Event
	res, err := b.engine.Step(context.Background(), loop.TurnInput{
		Run:     agentfleet.Run{ID: "r", Tenant: "t", Message: "m"},
		OnEvent: func(ev agentfleet.Event) { live = append(live, ev) },
	})
	require.NoError(t, err)
	require.Equal(t, res.Events, live, "the callback sees every event, in order, as the result carries it")
	require.Contains(t, eventTypes(live), agentfleet.EventModelCall)
	for _, ev := range live {
		require.Equal(t, "r", ev.RunID)
		require.Equal(t, 1, ev.Turn)
		require.Equal(t, agentfleet.EventVersion, ev.V)
	}
}

func TestStepReplyWithoutCodeIsTheAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: "  The answer is 42.\n"})
	out := b.drive(t, agentfleet.Run{Message: "what is 6*7?"}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `"The answer is 42."`, string(out.run.Answer))
	require.Equal(t, 1, out.run.Turn)
}

func TestStepErrorsGoBackToTheModelWithArgsKept(t *testing.T) {
	t.Parallel()
	var afterError agentfleet.ModelRequest
	b := setup(t,
		llm.Reply{Content: js(`function run(args) { return {a: 1}; }`)},
		llm.Reply{Content: js(`function run(args) {
  var x = null;
  return x.field;
}`)},
		llm.Reply{Content: js(`function run(args) { answer("a was " + args.a); }`),
			Check: func(r agentfleet.ModelRequest) error { afterError = r; return nil }},
	)
	out := b.drive(t, agentfleet.Run{Message: "t"}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `"a was 1"`, string(out.run.Answer), "the failed turn left args as they were")
	obs := afterError.Messages[len(afterError.Messages)-1].Content
	require.Contains(t, obs, "Turn 2 failed (exception): TypeError")
	require.Contains(t, obs, "args unchanged: {a: number}")
	require.NotContains(t, obs, "goja", "messages are cleaned of engine internals")
}

func TestStepSyntaxErrorAndUnclosedBlock(t *testing.T) {
	t.Parallel()
	var seen []string
	check := func(r agentfleet.ModelRequest) error {
		seen = append(seen, r.Messages[len(r.Messages)-1].Content)
		return nil
	}
	b := setup(t,
		llm.Reply{Content: js(`function run(args) { return {; }`)},
		llm.Reply{Content: "```javascript\nfunction run(args) {\n  return [1, 2,", Check: check},
		llm.Reply{Content: "Giving up: no.", Check: check},
	)
	out := b.drive(t, agentfleet.Run{Message: "t"}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.Contains(t, seen[0], "Turn 1 failed (syntax)")
	require.Contains(t, seen[1], "Turn 2 failed (syntax)")
	require.Contains(t, seen[1], "not closed")
}

func TestStepMaxTurns(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ return 1 }`)}, llm.Reply{Content: js(`function run(){ return 2 }`)})
	out := b.drive(t, agentfleet.Run{Message: "t", MaxTurns: 2}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusMaxTurns, out.run.Status)
	require.Equal(t, 2, out.run.Turn)
	require.Contains(t, out.run.Error, "max_turns (2)")
	require.Equal(t, agentfleet.EventDone, out.events[len(out.events)-1].Type)
}

func TestStepRunTimeout(t *testing.T) {
	t.Parallel()
	// A run past its deadline fails before paying the model.
	b := setup(t)
	out := b.drive(t, agentfleet.Run{Message: "t", Deadline: time.Now().Add(-time.Second)}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusFailed, out.run.Status)
	require.Contains(t, out.run.Error, "timed out")

	// A deadline passing while the script runs fails the run at once.
	b = setup(t, llm.Reply{Content: js(`function run(){ while (true) {} }`)})
	start := time.Now()
	out = b.drive(t, agentfleet.Run{Message: "t", Deadline: time.Now().Add(300 * time.Millisecond)}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusFailed, out.run.Status)
	require.Contains(t, out.run.Error, "timed out")
	require.Less(t, time.Since(start), 1500*time.Millisecond, "the run deadline interrupts the script before its CPU deadline")
}

func TestStepReusesARecordedReply(t *testing.T) {
	t.Parallel()
	// No scripted replies: a model call would fail the test.
	b := setup(t)
	_, _, _, err := b.rec.RecordReply(context.Background(), loop.Reply{RunID: "run-1", Turn: 1, Content: js(`function run(){ answer("from the record") }`),
		Model: "m", Usage: agentfleet.Usage{PromptTokens: 7, CompletionTokens: 3}}, nil)
	require.NoError(t, err)
	out := b.drive(t, agentfleet.Run{Message: "t"}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `"from the record"`, string(out.run.Answer))
	require.EqualValues(t, 10, out.run.Usage.Total(), "the recorded call's usage counts once")
	require.Empty(t, b.meter.reserves, "nothing reserved: the call was already paid")
}

func TestStepRecordsTheReplyBeforeRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ return 1 }`)})
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.NoError(t, err)
	rep, ok, err := b.rec.RecordedReply(context.Background(), "r", 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, res.Steps[0].Content, rep.Content)
}

func TestStepRecordsTheReplyThroughAStoreOutage(t *testing.T) {
	t.Parallel()
	// One scripted reply: a second model call would fail the test.
	b := setup(t, llm.Reply{Content: js(`function run(){ answer("done") }`), Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 12}})
	b.rec.failNext, b.rec.failErr = 3, errors.New("connection refused")
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.Equal(t, 4, b.rec.records, "three failed records, then one that took")
	_, ok, err := b.rec.RecordedReply(context.Background(), "r", 1)
	require.NoError(t, err)
	require.True(t, ok, "the reply is recorded")
	require.Equal(t, 1, b.rec.charged, "charged once, with the record")
	require.EqualValues(t, 42, b.meter.used)
	require.Zero(t, b.meter.reserved, "the reservation is settled")
}

func TestStepStopsRecordingAfterRecordRetryFor(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ answer("done") }`), Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 12}})
	b.rec.failNext, b.rec.failErr = 1000, errors.New("connection refused")
	engine, err := loop.New(loop.Config{Model: b.model, Sandbox: pool(t), Meter: b.meter, Recorder: b.rec, RecordRetryFor: 300 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	_, err = engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.ErrorContains(t, err, "record reply of turn 1: connection refused")
	require.Less(t, time.Since(start), 2*time.Second)
	require.Greater(t, b.rec.records, 2, "tried again before giving up")
	// Not recorded, but the call was made: its tokens are charged all
	// the same.
	require.EqualValues(t, 42, b.meter.used)
	require.Zero(t, b.meter.reserved)
}

func TestStepDoesNotRetryAStaleRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ answer("done") }`)})
	b.rec.failNext, b.rec.failErr = 1, loop.ErrStale
	_, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.ErrorIs(t, err, loop.ErrStale)
	require.Equal(t, 1, b.rec.records, "a stale turn is someone else's: no second try")
}

func TestStepDoesNotRetryARejectedRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ answer("done") }`), Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 12}})
	b.rec.failNext, b.rec.failErr = 1000, fmt.Errorf("%w: journal: primitive %q is not one the store keeps", loop.ErrRejected, "api:x.y")
	start := time.Now()
	_, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.ErrorIs(t, err, loop.ErrRejected)
	require.ErrorContains(t, err, "is not one the store keeps", "the store's reason")
	require.Equal(t, 1, b.rec.records, "the store would refuse it again: no second try")
	require.Less(t, time.Since(start), time.Second, "not RecordRetryFor's 30 s")
	require.EqualValues(t, 42, b.meter.used, "the call was made: its tokens are charged")
}

func TestStepWithoutBudgetParks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.meter.limit = 10
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeNoBudget, res.Outcome)
	require.NotNil(t, res.Budget)
	require.EqualValues(t, 10, res.Budget.Limit)
	require.Empty(t, res.Steps, "nothing to commit")
}

func TestStepRunMaxTokensEndsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.drive(t, agentfleet.Run{Message: "t", MaxTokens: 100, Usage: agentfleet.Usage{PromptTokens: 100}}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusFailed, out.run.Status)
	require.Contains(t, out.run.Error, "max_tokens of 100")
}

func TestStepAICallsAreMeteredLikeTurns(t *testing.T) {
	t.Parallel()
	b := setup(t,
		llm.Reply{Content: js(`function run(){ var s = ai("say hi"); var j = aiJSON("give json", {type: "object"}); answer(s + " " + j.k); }`),
			Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 10}},
		llm.Reply{Content: "hi", Usage: agentfleet.Usage{PromptTokens: 20, CompletionTokens: 2},
			Check: func(r agentfleet.ModelRequest) error {
				if r.Messages[len(r.Messages)-1].Content != "say hi" {
					return errors.New("ai() prompt not passed")
				}
				return nil
			}},
		llm.Reply{Content: `{"k":"there"}`, Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 3},
			Check: func(r agentfleet.ModelRequest) error {
				if !r.JSON || !strings.Contains(r.Messages[0].Content, `"type":"object"`) {
					return errors.New("aiJSON must ask for JSON matching the schema")
				}
				return nil
			}},
	)
	out := b.drive(t, agentfleet.Run{Message: "t"}, agentfleet.Agent{})
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status)
	require.JSONEq(t, `"hi there"`, string(out.run.Answer))
	require.EqualValues(t, 165, out.run.Usage.Total(), "turn and sub-calls counted")
	require.Len(t, b.meter.reserves, 3, "each model call reserved budget")
	require.EqualValues(t, 165, b.meter.used)
	require.Zero(t, b.meter.reserved)
	require.Equal(t, 1, b.rec.charged, "the turn's call is charged with its recorded reply, in one write")
}

func TestStepForAnUnlimitedTenantReservesNothingForTheTurn(t *testing.T) {
	t.Parallel()
	b := setup(t,
		llm.Reply{Content: js(`function run(){ answer(ai("say hi")); }`), Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 10}},
		llm.Reply{Content: "hi", Usage: agentfleet.Usage{PromptTokens: 20, CompletionTokens: 2}},
	)
	run := agentfleet.Run{ID: "run-1", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "t"}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, TenantUnlimited: true})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.Len(t, b.meter.reserves, 1, "only the script's ai() call reserves; the turn's own call holds nothing")
	require.Equal(t, 1, b.meter.unheld, "the turn's call took the unlimited reservation")
	require.Equal(t, 1, b.rec.charged, "the turn's call is still charged, with its recorded reply")
	require.EqualValues(t, 132, b.meter.used, "both calls are charged")
	require.Zero(t, b.meter.reserved)
}

func TestStepCompactsHistoryToTheContextBudget(t *testing.T) {
	t.Parallel()
	model := llm.NewScripted()
	eng, err := loop.New(loop.Config{Model: model, Sandbox: pool(t), ContextTokens: 1500})
	require.NoError(t, err)
	var steps []agentfleet.Step
	for turn := 1; turn <= 6; turn++ {
		steps = append(steps,
			agentfleet.Step{Turn: turn, Kind: agentfleet.StepModel, Content: strings.Repeat("x", 600)},
			agentfleet.Step{Turn: turn, Index: 1, Kind: agentfleet.StepObservation, Content: "obs"})
	}
	var req agentfleet.ModelRequest
	model.Push(llm.Reply{Content: "done", Check: func(r agentfleet.ModelRequest) error { req = r; return nil }})
	res, err := eng.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "t", Message: "m", Turn: 6}, Steps: steps})
	require.NoError(t, err)
	model.AssertDone(t)
	require.Equal(t, agentfleet.EventBudgetTrimmed, res.Events[0].Type, "a trim for the budget is a budget_trimmed event")
	require.LessOrEqual(t, agentfleet.EstimateTokens(req.Messages), int64(1500))
	require.Contains(t, req.Messages[2].Content, "turn(s) omitted")
}

func TestStepRedactsSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run(){ log("key is sk-live-123"); answer("sk-live-123 used") }`)})
	var steps []agentfleet.Step
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "t", Message: "m"}, Steps: steps, Secrets: []string{"sk-live-123"}})
	require.NoError(t, err)
	for _, ev := range res.Events {
		require.NotContains(t, ev.Content+ev.Summary+string(ev.Args), "sk-live-123", "event %s", ev.Type)
	}
	for _, s := range res.Steps {
		require.NotContains(t, s.Content, "sk-live-123")
	}
	require.NotContains(t, string(res.Answer), "sk-live-123")
}

func TestSystemPromptFitsItsBudget(t *testing.T) {
	t.Parallel()
	eng, err := loop.New(loop.Config{Model: llm.NewScripted(), Sandbox: pool(t)})
	require.NoError(t, err)
	prompt := eng.SystemPrompt(agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: "You are a careful general-purpose agent. Work in small steps, check intermediate results with log(), and answer plainly."}})
	tokens := len(prompt) / 4
	t.Logf("default system prompt: %d bytes, %d tokens (bytes/4)", len(prompt), tokens)
	require.LessOrEqual(t, tokens, 1500)
	for _, p := range sandbox.DefaultPrimitives() {
		require.Contains(t, prompt, p, "the API lists every default primitive")
	}
	require.True(t, strings.Index(prompt, "function run(args)") < strings.Index(prompt, "careful general-purpose"),
		"the protocol comes first, then the persona, then the API")
}

// instantModel replies at once with a fixed reply: the benchmark measures
// the engine, not a model.
type instantModel struct{ reply string }

func (m instantModel) Complete(context.Context, agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	return agentfleet.ModelResponse{Content: m.reply, Model: "instant", Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}, UsageReported: true}, nil
}

// BenchmarkTurn measures one whole turn in-process with an instant model:
// prompt composition, script extraction, a fresh sandbox runtime,
// execution, digest and serialization of the carried state.
func BenchmarkTurn(b *testing.B) {
	items := make([]map[string]any, 200)
	for i := range items {
		items[i] = map[string]any{"id": i, "name": fmt.Sprintf("item %d", i), "price": float64(i) * 1.25, "tags": []string{"a", "b"}}
	}
	carried, _ := json.Marshal(items)
	history := []agentfleet.Step{
		{Turn: 1, Kind: agentfleet.StepModel, Content: js(`function run(args) { return {n: 1}; }`)},
		{Turn: 1, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 ran.\nlog: (empty)\nreturned {n: number} (7 B), passed to the next turn as args\n"},
	}
	cases := []struct {
		name  string
		reply string
		args  json.RawMessage
	}{
		{"tiny", js(`function run(args) { log("n=" + args.n); return {n: args.n + 1}; }`), json.RawMessage(`{"n":1}`)},
		// The carry200: the turn returns 200 objects for the next
		// turn to read.
		{"carry200", js(`function run(args) {
  var out = [];
  for (var i = 0; i < 200; i++) {
    out.push({id: i, name: "item " + i, price: i * 1.25, tags: ["a", "b"]});
  }
  log("made " + out.length);
  return out;
}`), json.RawMessage(`{"n":1}`)},
		// And the turn after it: it reads the 200 carried objects and
		// returns 200 again, paying for the carry in and out.
		{"reprice200", js(`function run(args) {
  var out = [];
  for (var i = 0; i < args.length; i++) {
    var it = args[i];
    out.push({id: it.id, name: it.name, price: it.price * 2, tags: [it.tags[0], it.tags[1]]});
  }
  log("repriced " + out.length);
  return out;
}`), carried},
	}
	// A worker's turn passes its provider key, and a tenant with
	// secrets has them all opened and redacted; its agent names two.
	tenant := make([]agentfleet.OpenSecret, 10)
	for i := range tenant {
		tenant[i] = agentfleet.OpenSecret{Secret: agentfleet.Secret{Name: fmt.Sprintf("s%d", i), Hosts: []string{"api.example.com"}, Expose: i == 0},
			Value: fmt.Sprintf("value-%d-4f8e2a1c9b7d6e5f3a2b1c0d", i)}
	}
	cases = append(cases, struct {
		name  string
		reply string
		args  json.RawMessage
	}{"reprice200-secrets", cases[2].reply, cases[2].args})
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			eng, err := loop.New(loop.Config{Model: instantModel{tc.reply}, Sandbox: pool(b)})
			require.NoError(b, err)
			in := loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "t", Message: "reprice the items", Turn: 1, Args: tc.args, Status: agentfleet.StatusRunning}, Steps: history}
			if strings.HasSuffix(tc.name, "-secrets") {
				in.Secrets = []string{"sk-proj-4f8e2a1c9b7d6e5f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d"}
				in.TenantSecrets = tenant
				in.Agent.Secrets = []string{"s0", "s1"}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := eng.Step(ctx, in)
				if err != nil || res.Outcome != loop.OutcomeContinue {
					b.Fatalf("step: %v %v %v", err, res.Outcome, res.Error)
				}
			}
		})
	}
}

// A script looping on ai() is held to the run's max_tokens: every model
// call of the run counts, not only the turn's own, and the call that
// would pass the cap throws to the script. Each sub-call may complete
// only what is left.
func TestStepAILoopStopsAtTheRunsMaxTokens(t *testing.T) {
	t.Parallel()
	sub := llm.Reply{Content: "sub", Usage: agentfleet.Usage{PromptTokens: 400, CompletionTokens: 100}}
	replies := []llm.Reply{{Content: js(`function run(){
		var n = 0;
		try { for (var i = 0; i < 200; i++) { ai("x"); n++; } } catch (e) { log("stopped: " + e.message); }
		return {n: n};
	}`), Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 10}}}
	for range 6 {
		replies = append(replies, sub)
	}
	b := setup(t, replies...)
	out := b.drive(t, agentfleet.Run{Message: "t", MaxTokens: 3000}, agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{MaxModelCallsPerTurn: 1000}})
	require.JSONEq(t, `{"n":6}`, string(out.results[0].Args), "110 + 6 x 500 tokens: the seventh call has no room")
	require.Contains(t, out.results[0].Steps[1].Content, "max_tokens (3000) leaves no room")
	reqs := b.model.Requests()
	require.Len(t, reqs, 7)
	require.Equal(t, loop.AIMaxTokensDefault, reqs[1].MaxTokens)
	require.Less(t, reqs[6].MaxTokens, 400, "the last sub-call may complete only what the run has left")
	require.Equal(t, agentfleet.StatusFailed, out.run.Status, "the next turn finds the run over its cap")
	require.Contains(t, out.run.Error, "max_tokens of 3000")
}

// A turn makes at most MaxModelCallsPerTurn model calls (16 unless its
// agent says otherwise), its own included: the sub-call past the cap
// throws an error the script can catch.
func TestStepModelCallsPerTurnAreCapped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		agent agentfleet.Agent
		calls int
	}{
		{agentfleet.Agent{}, loop.MaxModelCallsPerTurnDefault},
		{agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{MaxModelCallsPerTurn: 3}}, 3},
	} {
		replies := []llm.Reply{{Content: js(`function run(){
			var n = 0;
			try { for (var i = 0; i < 100; i++) { ai("x"); n++; } } catch (e) { return {n: n, err: e.message}; }
			return {n: n};
		}`)}}
		for range c.calls - 1 {
			replies = append(replies, llm.Reply{Content: "sub"})
		}
		replies = append(replies, llm.Reply{Content: js(`function run(args){ answer(args.n) }`)})
		b := setup(t, replies...)
		out := b.drive(t, agentfleet.Run{Message: "t"}, c.agent)
		require.Equal(t, agentfleet.StatusCompleted, out.run.Status, out.run.Error)
		require.JSONEq(t, fmt.Sprint(c.calls-1), string(out.run.Answer))
		var first struct{ Err string }
		require.NoError(t, json.Unmarshal(out.results[0].Args, &first))
		require.Contains(t, first.Err, fmt.Sprintf("max_model_calls_per_turn %d", c.calls))
	}
}

// spawnRecorder is a TurnInput.Spawn that records what it was asked.
type spawnRecorder struct {
	mu    sync.Mutex
	calls []agentfleet.SpawnRequest
	index []int
}

func (s *spawnRecorder) spawn(_ context.Context, index int, req agentfleet.SpawnRequest) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, req)
	s.index = append(s.index, index)
	return fmt.Sprintf("child-%d", index), nil
}

// A script spawns children and waits for them: the turn commits the run
// waiting for them, counts them, announces each, and the next turn's
// args carry their results in the order waited for, wrapped when the
// script returned no object.
func TestStepSpawnAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: js(`function run() {
		var a = spawn({message: "one", max_turns: 3}), b = spawn({message: "two", agent: "helper"});
		wait([b, a], {timeout: 60000});
		return "plain";
	}`)})
	var rec spawnRecorder
	run := agentfleet.Run{ID: "p1", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "fan out"}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Spawn: rec.spawn})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusWaitingChildren, res.Status)
	require.Equal(t, []string{"child-1", "child-0"}, res.WaitIDs)
	require.WithinDuration(t, time.Now().Add(time.Minute), res.WaitUntil, 5*time.Second)
	require.Equal(t, 2, res.Spawned)
	require.Equal(t, []int{0, 1}, rec.index)
	require.Equal(t, agentfleet.SpawnRequest{Message: "two", Agent: "helper"}, rec.calls[1])
	require.Equal(t, 3, rec.calls[0].MaxTurns)
	var spawned []string
	for _, ev := range res.Events {
		if ev.Type == agentfleet.EventChildSpawned {
			spawned = append(spawned, ev.Summary)
		}
	}
	require.Equal(t, []string{"child-0", "child-1"}, spawned)
	require.Contains(t, res.Steps[1].Content, "waits for 2 child run(s)")

	// Resumed: the children as they are now.
	b.model.Push(llm.Reply{Content: js(`function run(args) { answer(args) }`)})
	run.Turn, run.Args, run.Status, run.Children = 1, res.Args, agentfleet.StatusRunning, 2
	run.WaitIDs = res.WaitIDs
	big := `"` + strings.Repeat("x", agentfleet.ChildAnswerMaxBytes+10) + `"`
	kids := []agentfleet.Run{
		{ID: "child-0", ParentRunID: "p1", Status: agentfleet.StatusCompleted, Answer: json.RawMessage(big)},
		{ID: "child-1", ParentRunID: "p1", Status: agentfleet.StatusFailed, Error: "boom"},
	}
	res, err = b.engine.Step(context.Background(), loop.TurnInput{Run: run, Children: kids})
	require.NoError(t, err)
	var got struct {
		Value    string
		Children []agentfleet.ChildResult
	}
	require.NoError(t, json.Unmarshal(res.Answer, &got))
	require.Equal(t, "plain", got.Value, "a non-object return is wrapped")
	require.Len(t, got.Children, 2)
	require.Equal(t, agentfleet.ChildResult{ID: "child-1", Status: agentfleet.StatusFailed, Error: "boom"}, got.Children[0])
	require.True(t, got.Children[1].Truncated)
	var cut string
	require.NoError(t, json.Unmarshal(got.Children[1].Answer, &cut))
	require.Equal(t, strings.Repeat("x", agentfleet.ChildAnswerMaxBytes), cut)
}

// spawn() past the run's limits, and wait() with answer() in one turn,
// are errors the script sees.
func TestStepSpawnLimits(t *testing.T) {
	t.Parallel()
	script := js(`function run() { try { spawn({message: "x"}) } catch (e) { return {err: e.message} } return {err: ""} }`)
	for _, c := range []struct {
		name string
		run  agentfleet.Run
		want string
	}{
		{"children", agentfleet.Run{Children: loop.MaxChildrenDefault}, "at most 100 children"},
		{"depth", agentfleet.Run{ParentRunID: "p0", Depth: loop.MaxDepthDefault}, "at most 3 deep"},
	} {
		b := setup(t, llm.Reply{Content: script})
		var rec spawnRecorder
		c.run.ID, c.run.Tenant, c.run.Status, c.run.Message = "r1", "acme", agentfleet.StatusRunning, "m"
		res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: c.run, Spawn: rec.spawn})
		require.NoError(t, err)
		require.Contains(t, string(res.Args), c.want, c.name)
		require.Empty(t, rec.calls, c.name)
		require.Zero(t, res.Spawned)
	}

	b := setup(t, llm.Reply{Content: js(`function run() { wait([spawn({message: "x"})]); answer("done") }`)})
	var rec spawnRecorder
	res, err := b.engine.Step(context.Background(), loop.TurnInput{
		Run: agentfleet.Run{ID: "r1", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "m"}, Spawn: rec.spawn})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusRunning, res.Status, "the turn failed; the run goes on")
	require.Contains(t, res.Steps[1].Content, "wait() and answer() in one turn")
	require.Equal(t, 1, res.Spawned, "the child it spawned is counted all the same")
}

func TestStepWaitsForApprovalThenRunsTheTurnAgain(t *testing.T) {
	t.Parallel()
	// One model reply: the turn run again after the decision reuses it.
	b := setup(t, llm.Reply{Content: js(`function run(){
  try { spawn({message: "deploy"}); answer("spawned") } catch (e) { answer("refused: " + e.message) }
}`), Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}})
	agent := agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Approve: []string{"spawn"}}}
	run := agentfleet.Run{ID: "r", Tenant: "acme", Message: "t"}
	var state agentfleet.ApprovalState = agentfleet.ApprovalPending
	approval := func(_ context.Context, c agentfleet.ApprovalCall) (agentfleet.ApprovalState, string, error) {
		require.Len(t, c.Digest, 64, "bound to the exact call")
		c.Digest = ""
		require.Equal(t, agentfleet.ApprovalCall{Index: 0, Primitive: "spawn", Preview: "deploy"}, c)
		return state, "not today", nil
	}
	spawns := 0
	spawn := func(context.Context, int, agentfleet.SpawnRequest) (string, error) { spawns++; return "child", nil }

	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Approval: approval, Spawn: spawn, FirstAttempt: true})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeApproval, res.Outcome)
	require.Equal(t, "spawn", res.Approval.Primitive)
	require.Empty(t, res.Steps, "nothing to commit")
	require.Zero(t, spawns)

	state = agentfleet.ApprovalDenied
	res, err = b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Approval: approval, Spawn: spawn})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.JSONEq(t, `"refused: spawn was denied: not today"`, string(res.Answer))
	require.Equal(t, 1, b.rec.records, "the recorded reply is reused")

	state = agentfleet.ApprovalApproved
	res, err = b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Approval: approval, Spawn: spawn})
	require.NoError(t, err)
	require.JSONEq(t, `"spawned"`, string(res.Answer))
	require.Equal(t, 1, spawns)
}
