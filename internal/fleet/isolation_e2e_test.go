package fleet_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// subCallTurns answers "good N" and "poison N" tasks in two turns: the
// first script makes one ai() sub-call, the second answers. The replies
// to "poison" tasks carry a marker the test's database refuses to store.
func subCallTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	task := r.FirstUser()
	if strings.HasPrefix(task, "sub-call of ") {
		return "ok", usage, nil
	}
	marker := ""
	if strings.HasPrefix(task, "poison") {
		marker = " POISON"
	}
	if assistantTurns(r) == 0 {
		return fmt.Sprintf("Ask.%s\n```javascript\nfunction run(args) { return {r: ai(%q)} }\n```", marker, "sub-call of "+task), usage, nil
	}
	return "Answer.\n```javascript\nfunction run(args) { answer(args.r) }\n```", usage, nil
}

// One turn the database refuses must fail only itself. On PostgreSQL a
// worker of 16 slots group-commits its turns; a trigger refuses the steps
// of a few runs, which fails the statement of every batch they are in.
// Every other run commits each turn once, and no model call (the turn's
// or its script's ai()) is made twice; the refused runs end dead-lettered.
func TestFleetABatchMemberTheStoreRefusesFailsOnlyItself(t *testing.T) {
	t.Parallel()
	st, schema := pgtest.OpenSchema(t)
	pgtest.Exec(t, schema, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.content LIKE '%POISON%' THEN RAISE EXCEPTION 'this test refuses poisoned steps'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON steps FOR EACH ROW EXECUTE FUNCTION refuse_poison();`)
	f := setupFleetWith(t, fleetOptions{responder: subCallTurns, latency: 20 * time.Millisecond, workers: 1, slots: 16, store: st})

	const good, poisoned = 60, 4
	var tasks []string
	for i := range good + poisoned {
		task := fmt.Sprintf("good %d", i)
		if i%(good/poisoned) == 0 && i/(good/poisoned) < poisoned {
			task = fmt.Sprintf("poison %d", i)
		}
		tasks = append(tasks, task)
	}
	runs := make([]agentfleet.Run, len(tasks))
	for i, task := range tasks {
		runs[i] = f.submit(wire.RunCreateRequest{Message: task})
	}
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = f.wait(runs[i].ID, 60*time.Second)
		}()
	}
	wg.Wait()

	failed := 0
	for i, run := range runs {
		if strings.HasPrefix(tasks[i], "poison") {
			require.Equal(t, agentfleet.StatusFailed, run.Status, "run of %q", tasks[i])
			failed++
			continue
		}
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "run of %q: %s", tasks[i], run.Error)
		f.requireOneCommitPerTurnWith(run, map[int]int{1: 1})
		require.Equal(t, 1, f.modelCalls(tasks[i], 1), "turn 1 replies of %q", tasks[i])
		require.Equal(t, 1, f.modelCalls(tasks[i], 2), "turn 2 replies of %q", tasks[i])
		require.Equal(t, 1, f.modelCalls("sub-call of "+tasks[i], 1), "ai() calls of %q", tasks[i])
	}
	require.Equal(t, poisoned, failed)
}

// hostileTurns plays the scripts a careless or hostile model writes, by
// task: bytes PostgreSQL refuses in logs, carried data and the answer; a
// loop of ai() sub-calls, cheap ("ai loop") or dear ("ai loop dear"); 64
// MiB of log in one call, then 8 MiB in 1 MiB calls (the sandbox's own
// tests log 64 MiB in many calls). "fine" tasks answer at once.
func hostileTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	task := r.FirstUser()
	switch {
	case task == "loop call dear":
		return "ok", agentfleet.Usage{PromptTokens: 400, CompletionTokens: 100}, nil
	case task == "loop call":
		return "ok", usage, nil
	}
	script := "function run() { answer('fine') }"
	switch task {
	case "nul":
		if assistantTurns(r) == 0 {
			script = `function run() { log("a\u0000b"); return {s: "x\u0000y"} }`
		} else {
			script = `function run(args) { answer("done\u0000" + args.s) }`
		}
	case "ai loop", "ai loop dear":
		call := "loop call"
		if task == "ai loop dear" {
			call = "loop call dear"
		}
		script = fmt.Sprintf(`function run() {
			var n = 0, err = "";
			for (var i = 0; i < 200; i++) { try { ai(%q); n++ } catch (e) { err = e.message } }
			answer({n: n, err: err})
		}`, call)
	case "big log":
		script = `function run() { try { log("x".repeat(64 << 20)) } catch (e) {} for (var i = 0; i < 8; i++) log("y".repeat(1 << 20)); answer("logged") }`
	}
	return "Here.\n```javascript\n" + script + "\n```", usage, nil
}

// The hostile scripts end their own runs one way or another and hurt no
// one else's: on PostgreSQL, a run logging, carrying and answering U+0000
// completes with U+FFFD in their place; a script looping on ai() is
// stopped at the turn's model call cap, or at its run's max_tokens;
// megabytes of log are cut, not stored; and the ordinary runs beside them
// complete with one model call per turn.
func TestFleetHostileScriptsHurtNoOneElse(t *testing.T) {
	t.Parallel()
	var sb sandbox.Config
	if raceEnabled {
		// Building and logging a 64 MiB string takes the race
		// detector's build past the default 5 s of CPU: the turn
		// would time out every time and the run never end.
		sb.Limits.CPUTime = 60 * time.Second
	}
	f := setupFleetWith(t, fleetOptions{responder: hostileTurns, workers: 1, slots: 8, store: pgtest.Open(t), sandbox: sb})
	hostile := map[string]wire.RunCreateRequest{
		"nul":          {Message: "nul"},
		"ai loop":      {Message: "ai loop", MaxTokens: 3000},
		"ai loop dear": {Message: "ai loop dear", MaxTokens: 3000},
		"big log":      {Message: "big log"},
	}
	var ids []string
	for _, req := range hostile {
		ids = append(ids, f.submit(req).ID)
	}
	var fine []string
	for range 20 {
		fine = append(fine, f.submit(wire.RunCreateRequest{Message: "fine"}).ID)
	}
	runs := map[string]agentfleet.Run{}
	for _, id := range ids {
		run := f.wait(id, 60*time.Second)
		runs[run.Message] = run
	}

	nul := runs["nul"]
	require.Equal(t, agentfleet.StatusCompleted, nul.Status, nul.Error)
	require.JSONEq(t, `"done\ufffdx\ufffdy"`, string(nul.Answer))
	var logged bool
	for _, ev := range f.events(nul.ID) {
		if ev.Type == agentfleet.EventLog {
			require.Equal(t, "a\ufffdb\n", ev.Content)
			logged = true
		}
	}
	require.True(t, logged)

	var loop struct {
		N   int
		Err string
	}
	cheap := runs["ai loop"]
	require.Equal(t, agentfleet.StatusCompleted, cheap.Status, cheap.Error)
	require.NoError(t, json.Unmarshal(cheap.Answer, &loop))
	require.Equal(t, loop.N, f.modelCalls("loop call", 1))
	require.Equal(t, 15, loop.N, "the turn's own call and 15 sub-calls: the default cap of 16")
	require.Contains(t, loop.Err, "max_model_calls_per_turn")

	dear := runs["ai loop dear"]
	require.Equal(t, agentfleet.StatusCompleted, dear.Status, dear.Error)
	require.NoError(t, json.Unmarshal(dear.Answer, &loop))
	require.Equal(t, loop.N, f.modelCalls("loop call dear", 1))
	require.Less(t, loop.N, 7, "500 tokens a call fit about 6 times in 3,000")
	require.Contains(t, loop.Err, "max_tokens (3000)")
	require.LessOrEqual(t, dear.Usage.Total(), int64(3000+500), "at most the last call over the cap")

	big := runs["big log"]
	require.Equal(t, agentfleet.StatusCompleted, big.Status, big.Error)
	var logBytes int
	for _, ev := range f.events(big.ID) {
		logBytes += len(ev.Content)
	}
	require.Less(t, logBytes, 1<<20, "the log is cut to its cap, not stored whole")

	for _, id := range fine {
		run := f.wait(id, 60*time.Second)
		require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
		f.requireOneCommitPerTurn(run)
	}
	require.Equal(t, 20, f.modelCalls("fine", 1), "no ordinary run's turn was run twice")
}
