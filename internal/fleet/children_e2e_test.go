package fleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// fanOutTurns plays a parent that spawns children and answers from their
// answers, and the children: "fan out N" spawns "square 0".."square
// N-1", waits for them and answers their answers joined; "square K"
// answers K*K.
func fanOutTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	task := r.FirstUser()
	var script string
	switch {
	case strings.HasPrefix(task, "square "):
		var k int
		if _, err := fmt.Sscanf(task, "square %d", &k); err != nil {
			return "", usage, err
		}
		script = fmt.Sprintf("function run() { answer(%d) }", k*k)
	case strings.HasPrefix(task, "fan out ") && assistantTurns(r) == 0:
		var n int
		if _, err := fmt.Sscanf(task, "fan out %d", &n); err != nil {
			return "", usage, err
		}
		script = fmt.Sprintf(`function run() {
			var ids = [];
			for (var i = 0; i < %d; i++) ids.push(spawn({message: "square " + i}));
			wait(ids);
			return {ids: ids};
		}`, n)
	case strings.HasPrefix(task, "fan out "):
		script = `function run(args) { answer(args.children.map(function (c) { return c.status + ":" + c.answer }).join(",")) }`
	default:
		return "", usage, fmt.Errorf("unexpected task %q", task)
	}
	return "Here.\n```javascript\n" + script + "\n```", usage, nil
}

// A parent spawns five children, waits for them holding no worker, and
// answers from their answers; each child names its parent, and the
// parent's events announce each child.
func TestFleetParentWaitsForItsChildren(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := fleetOptions{responder: fanOutTurns}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			parentWaitsForItsChildren(t, setupFleetWith(t, o))
		})
	}
}

func parentWaitsForItsChildren(t *testing.T, f *testFleet) {
	parent := f.wait(f.submit(api.RunCreateRequest{Message: "fan out 5"}).ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, parent.Status, parent.Error)
	require.JSONEq(t, `"completed:0,completed:1,completed:4,completed:9,completed:16"`, string(parent.Answer))
	require.Equal(t, 5, parent.Children)

	kids, err := f.store.RunList(f.ctx, store.RunListParams{Tenant: parent.Tenant, ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 5)
	for _, k := range kids.Runs {
		require.Equal(t, agentfleet.StatusCompleted, k.Status)
		require.Equal(t, 1, k.Depth)
		require.Empty(t, k.SessionID)
		f.requireOneCommitPerTurn(k)
		require.Equal(t, "child of "+parent.ID, f.events(k.ID)[0].Summary, "the child's queued event names its parent")
	}
	spawned := 0
	for _, ev := range f.events(parent.ID) {
		if ev.Type == agentfleet.EventChildSpawned {
			spawned++
		}
	}
	require.Equal(t, 5, spawned)
	f.requireOneCommitPerTurn(parent)
}
