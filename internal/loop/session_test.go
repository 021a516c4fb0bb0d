package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// earlierRun is an ended run of session s1 as the store gives it: two
// turns, the second answering.
func earlierRun(id, message string, answer string) loop.SessionRun {
	ans, _ := json.Marshal(answer)
	return loop.SessionRun{
		Run: agentfleet.Run{ID: id, Tenant: "acme", SessionID: "s1", Status: agentfleet.StatusCompleted, Message: message,
			Turn: 2, Answer: ans, Args: json.RawMessage(`{"items":[1,2,3],"cursor":"c-7"}`)},
		Steps: []agentfleet.Step{
			{RunID: id, Turn: 1, Kind: agentfleet.StepModel, Content: "I list them.\n```javascript\nfunction run(){ log('found 3'); return {items: [1,2,3]}; }\n```"},
			{RunID: id, Turn: 1, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 ran.\nlog:\nfound 3\nreturned {items: number[3]} (17 B)\n"},
			{RunID: id, Turn: 2, Kind: agentfleet.StepModel, Content: "Done.\n```javascript\nfunction run(a){ answer('three of them'); }\n```"},
			{RunID: id, Turn: 2, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 2 answered.\n"},
		},
	}
}

func contents(msgs []agentfleet.ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role + ": " + m.Content + "\n")
	}
	return b.String()
}

// A session's run recalls its earlier runs, oldest first, before its
// task: each one's message, prose with the scripts elided, logs and
// answer; its first turn's args is the last one's final carried value,
// and the task says so.
func TestSessionRunRecallsTheEarlierRuns(t *testing.T) {
	t.Parallel()
	var first agentfleet.ModelRequest
	b := setup(t,
		llm.Reply{Content: js(`function run(args) { log("cursor " + args.cursor); return args; }`),
			Check: func(r agentfleet.ModelRequest) error { first = r; return nil }},
		llm.Reply{Content: "They were three."})
	session := []loop.SessionRun{
		earlierRun("r1", "How many items are there?", "three of them"),
		earlierRun("r2", "And which is the first?", "item 1"),
	}
	run := agentfleet.Run{ID: "r3", SessionID: "s1", Message: "Repeat your first answer."}
	run.Tenant, run.Status = "acme", agentfleet.StatusRunning
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Session: session})
	require.NoError(t, err)
	require.Equal(t, loop.OutcomeContinue, res.Outcome)

	msgs := first.Messages
	all := contents(msgs[1:])
	require.Equal(t, agentfleet.RoleUser, msgs[1].Role)
	require.Equal(t, "How many items are there?", msgs[1].Content, "the oldest run's message comes first")
	require.Less(t, strings.Index(all, "How many items"), strings.Index(all, "And which is the first?"))
	require.Less(t, strings.Index(all, "And which is the first?"), strings.Index(all, "Repeat your first answer."))
	require.Contains(t, all, "I list them.\n[script of turn 1 elided]", "prose stays, the script goes")
	require.NotContains(t, all, "log('found 3')")
	require.Contains(t, all, "log:\nfound 3", "its logs stay")
	require.Contains(t, all, "assistant: Done.\n[script of turn 2 elided]\nAnswer: three of them")
	require.Contains(t, all, "Answer: item 1")
	task := msgs[len(msgs)-1]
	require.True(t, strings.HasPrefix(task.Content, "Repeat your first answer."), "the run's task comes last")
	require.Contains(t, task.Content, "what this session's previous run carried last: {cursor: string, items: number[3]}")
	require.NotContains(t, all, "c-7", "the carried value itself never enters the prompt")
	require.JSONEq(t, `{"items":[1,2,3],"cursor":"c-7"}`, string(res.Args), "turn 1 got the previous run's value as args")
	require.Contains(t, res.Steps[1].Content, "cursor c-7")

	// The next turn's prompt starts with this one's.
	run.Turn, run.Args = res.Turn, res.Args
	second, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Session: session, Steps: res.Steps})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, second.Status)
	reqs := b.model.Requests()
	require.Equal(t, reqs[0].Messages, reqs[1].Messages[:len(reqs[0].Messages)])
}

// The run's context, when given, is turn 1's args, not the previous
// run's value; a run without a session sees only its own task.
func TestSessionRunContextWinsAndRunsWithoutSessionSeeNoHistory(t *testing.T) {
	t.Parallel()
	var withCtx, alone agentfleet.ModelRequest
	b := setup(t,
		llm.Reply{Content: js(`function run(args) { answer(args); }`), Check: func(r agentfleet.ModelRequest) error { withCtx = r; return nil }},
		llm.Reply{Content: js(`function run(args) { answer(args); }`), Check: func(r agentfleet.ModelRequest) error { alone = r; return nil }},
	)
	session := []loop.SessionRun{earlierRun("r1", "How many items are there?", "three of them")}
	run := agentfleet.Run{ID: "r2", Tenant: "acme", SessionID: "s1", Message: "Use this.", Context: json.RawMessage(`{"n":5}`)}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Session: session})
	require.NoError(t, err)
	require.JSONEq(t, `{"n":5}`, string(res.Answer))
	require.Contains(t, withCtx.Messages[len(withCtx.Messages)-1].Content, "the context given with the task: {n: number}")

	res, err = b.engine.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r9", Tenant: "acme", Message: "Alone."}})
	require.NoError(t, err)
	require.JSONEq(t, `null`, string(res.Answer))
	require.Len(t, alone.Messages, 2)
	require.Equal(t, "Alone.", alone.Messages[1].Content)
}

// An earlier run that failed shows its error; one answered by a reply
// without code shows that reply once; logs are held to the log cap.
func TestSessionRecordEndsAndLogCap(t *testing.T) {
	t.Parallel()
	var req agentfleet.ModelRequest
	model := llm.NewScripted(llm.Reply{Content: "ok", Check: func(r agentfleet.ModelRequest) error { req = r; return nil }})
	eng, err := loop.New(loop.Config{Model: model, Sandbox: pool(t), SessionLogCap: 40})
	require.NoError(t, err)
	failed := loop.SessionRun{
		Run: agentfleet.Run{ID: "r1", Status: agentfleet.StatusFailed, Message: "Fetch it.", Turn: 1, Error: "run reached max_tokens"},
		Steps: []agentfleet.Step{
			{Turn: 1, Kind: agentfleet.StepModel, Content: "```javascript\nfunction run(){ log('" + strings.Repeat("z", 100) + "'); return 1; }\n```"},
			{Turn: 1, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 ran.\nlog:\n" + strings.Repeat("z", 100) + "\nreturned number (1 B)\n"},
		},
	}
	replied := loop.SessionRun{
		Run: agentfleet.Run{ID: "r2", Status: agentfleet.StatusCompleted, Message: "Say hi.", Turn: 1, Answer: json.RawMessage(`"Hi there."`)},
		Steps: []agentfleet.Step{
			{Turn: 1, Kind: agentfleet.StepModel, Content: "Hi there."},
		},
	}
	_, err = eng.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r3", SessionID: "s", Message: "Next."}, Session: []loop.SessionRun{failed, replied}})
	require.NoError(t, err)
	model.AssertDone(t)
	all := contents(req.Messages[1:])
	require.Contains(t, all, "[run ended failed: run reached max_tokens]")
	require.Contains(t, all, strings.Repeat("z", 40)+"\n[60 more characters of log cut]")
	require.NotContains(t, all, strings.Repeat("z", 41))
	require.Equal(t, 1, strings.Count(all, "Hi there."), "a reply that was the answer shows once")
}

// A summary step replaces everything of the session before it: in an
// earlier run, the runs before it and its own message and turns through
// the one it names; in the run itself, the whole session and its turns
// through that one.
func TestSessionSummaryReplacesWhatItCovers(t *testing.T) {
	t.Parallel()
	r1 := earlierRun("r1", "First question?", "first answer")
	r2 := earlierRun("r2", "Second question?", "second answer")
	r2.Steps = append(r2.Steps[:2:2], agentfleet.Step{RunID: "r2", Turn: 2, Index: 2, Kind: agentfleet.StepSummary,
		Content: loop.RenderSummary(1, "The user asked two questions; there are three items.")}, r2.Steps[2], r2.Steps[3])
	r3 := earlierRun("r3", "Third question?", "third answer")

	var got []agentfleet.ModelRequest
	check := func(r agentfleet.ModelRequest) error { got = append(got, r); return nil }
	b := setup(t, llm.Reply{Content: "a", Check: check}, llm.Reply{Content: "b", Check: check})
	_, err := b.engine.Step(context.Background(), loop.TurnInput{
		Run: agentfleet.Run{ID: "r4", SessionID: "s1", Message: "Fourth?"}, Session: []loop.SessionRun{r1, r2, r3}})
	require.NoError(t, err)
	all := contents(got[0].Messages[1:])
	require.True(t, strings.HasPrefix(all, "user: [summary of the session through turn 1]\nThe user asked two questions"), all)
	for _, gone := range []string{"First question?", "first answer", "Second question?"} {
		require.NotContains(t, all, gone, "covered by the summary")
	}
	require.Equal(t, 1, strings.Count(all, "I list them."), "only the third run's first turn: the second's is covered")
	require.Contains(t, all, "Answer: second answer", "the covered run's turns after the summary stay")
	require.Contains(t, all, "Third question?")
	require.Contains(t, all, "Fourth?")

	// A summary in the run itself covers the whole session and its turns
	// through the one it names.
	own := []agentfleet.Step{
		{Turn: 1, Kind: agentfleet.StepModel, Content: js(`function run(){ return 1; }`)},
		{Turn: 1, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 ran.\nreturned number (1 B)\n"},
		{Turn: 2, Kind: agentfleet.StepModel, Content: "Second turn.\n```javascript\nfunction run(){ return 2; }\n```"},
		{Turn: 2, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 2 ran.\nreturned number (1 B)\n"},
		{Turn: 2, Index: 2, Kind: agentfleet.StepSummary, Content: loop.RenderSummary(1, "All of it, folded.")},
	}
	_, err = b.engine.Step(context.Background(), loop.TurnInput{
		Run: agentfleet.Run{ID: "r4", SessionID: "s1", Message: "Fourth?", Turn: 2}, Session: []loop.SessionRun{r1, r2, r3}, Steps: own})
	require.NoError(t, err)
	msgs := got[1].Messages
	require.Equal(t, loop.RenderSummary(1, "All of it, folded."), msgs[1].Content)
	require.True(t, strings.HasPrefix(msgs[2].Content, "Fourth?"), "the task stays")
	require.Equal(t, "Second turn.\n[script of turn 2 elided]", msgs[3].Content, "turns after the summary stay")
	require.Len(t, msgs, 5)
	require.NotContains(t, contents(msgs), "Third question?")
}

// Over the budget, the session's oldest runs go first, whole, then the
// run's oldest turns; each such trim is a budget_trimmed event.
func TestSessionHistoryTrimmedToTheBudget(t *testing.T) {
	t.Parallel()
	model := llm.NewScripted()
	eng, err := loop.New(loop.Config{Model: model, Sandbox: pool(t), ContextTokens: 1500})
	require.NoError(t, err)
	var session []loop.SessionRun
	for i := range 6 {
		r := earlierRun("r"+string(rune('a'+i)), "Question "+string(rune('A'+i))+" "+strings.Repeat("q", 600), "answer")
		session = append(session, r)
	}
	var req agentfleet.ModelRequest
	model.Push(llm.Reply{Content: "done", Check: func(r agentfleet.ModelRequest) error { req = r; return nil }})
	res, err := eng.Step(context.Background(), loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "t", SessionID: "s", Message: "Now?"}, Session: session})
	require.NoError(t, err)
	model.AssertDone(t)
	require.LessOrEqual(t, agentfleet.EstimateTokens(req.Messages), int64(1500))
	all := contents(req.Messages[1:])
	require.Contains(t, all, "earlier run(s) of this session omitted to fit the context")
	require.NotContains(t, all, "Question A", "the oldest run went first")
	require.Contains(t, all, "Question F", "the newest stayed")
	require.Equal(t, agentfleet.EventBudgetTrimmed, res.Events[2].Type)
	require.Contains(t, res.Events[2].Summary, "earlier run(s) of the session left out of the prompt to fit 1500 tokens")
}

// The offline demo model (agentctl dev) plays each run of a session as a
// new task: the history it now sees before the task does not confuse it.
func TestSessionWithTheDemoModel(t *testing.T) {
	t.Parallel()
	eng, err := loop.New(loop.Config{Model: llm.Demo{}, Sandbox: pool(t)})
	require.NoError(t, err)
	var session []loop.SessionRun
	for _, task := range []string{"fizzbuzz to 15", "the first 10 fibonacci numbers", "primes below 30"} {
		run := agentfleet.Run{ID: "run-" + task, Tenant: "acme", SessionID: "s", Message: task, Status: agentfleet.StatusRunning}
		var steps []agentfleet.Step
		for range 10 {
			res, err := eng.Step(context.Background(), loop.TurnInput{Run: run, Session: session, Steps: steps})
			require.NoError(t, err)
			run.Turn, run.Args, run.Status, run.Answer, run.Error = res.Turn, res.Args, res.Status, res.Answer, res.Error
			steps = append(steps, res.Steps...)
			if res.Outcome == loop.OutcomeFinished {
				break
			}
		}
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "%s: %s", task, run.Error)
		require.NotContains(t, string(run.Answer), "Sorry", "%s: the demo did not take the history for a failure", task)
		session = append(session, loop.SessionRun{Run: run, Steps: steps})
	}
}

// BenchmarkTurnSession is BenchmarkTurn's tiny turn in a session with 10
// earlier runs to recall: what composing the session's history costs.
func BenchmarkTurnSession(b *testing.B) {
	reply := js(`function run(args) { log("n=" + args.n); return {n: args.n + 1}; }`)
	eng, err := loop.New(loop.Config{Model: instantModel{reply}, Sandbox: pool(b)})
	require.NoError(b, err)
	var session []loop.SessionRun
	for i := range 10 {
		session = append(session, earlierRun("r"+string(rune('a'+i)), "Question "+string(rune('A'+i)), "answer"))
	}
	in := loop.TurnInput{Run: agentfleet.Run{ID: "r", Tenant: "t", SessionID: "s", Message: "go on", Turn: 1, Args: json.RawMessage(`{"n":1}`), Status: agentfleet.StatusRunning},
		Session: session, Steps: []agentfleet.Step{
			{Turn: 1, Kind: agentfleet.StepModel, Content: js(`function run(args) { return {n: 1}; }`)},
			{Turn: 1, Index: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 ran.\nreturned {n: number} (7 B)\n"},
		}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := eng.Step(ctx, in)
		if err != nil || res.Outcome != loop.OutcomeContinue {
			b.Fatalf("step: %v %v %v", err, res.Outcome, res.Error)
		}
	}
}
