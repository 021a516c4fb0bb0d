package fleet_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
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
		runs[i] = f.submit(api.RunCreateRequest{Message: task})
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
