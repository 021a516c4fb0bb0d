package fleet_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
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
	case task == "spin":
		script = "function run() { while (true) {} }"
	case task == "hold":
		return "held", usage, nil
	case strings.HasPrefix(task, "fan out spin ") && assistantTurns(r) == 0:
		var n int
		if _, err := fmt.Sscanf(task, "fan out spin %d", &n); err != nil {
			return "", usage, err
		}
		script = fmt.Sprintf(`function run() { var ids = []; for (var i = 0; i < %d; i++) ids.push(spawn({message: "spin"})); wait(ids); return {} }`, n)
	case task == "wait briefly" && assistantTurns(r) == 0:
		script = `function run() { wait([spawn({message: "spin"})], {timeout: 300}); return {} }`
	case task == "wait briefly":
		script = `function run(args) { answer(args.children[0].status) }`
	case strings.HasPrefix(task, "fan out ") && strings.HasSuffix(task, " and hold") && assistantTurns(r) == 0:
		script = `function run() { var ids = [spawn({message: "square 2"}), spawn({message: "square 3"})]; ai("hold"); wait(ids); return {ids: ids} }`
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
	parent := f.wait(f.submit(wire.RunCreateRequest{Message: "fan out 5"}).ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, parent.Status, parent.Error)
	require.JSONEq(t, `"completed:0,completed:1,completed:4,completed:9,completed:16"`, string(parent.Answer))
	require.Equal(t, 5, parent.Children)

	kids, err := f.tenant.ListRuns(f.ctx, client.ListRunsParams{ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 5)
	var childUsage agentfleet.Usage
	for _, k := range kids.Runs {
		childUsage = childUsage.Add(k.Usage)
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

	// The run's view rolls its children's usage up.
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.dispatcher.URL()+"/v1/runs/"+parent.ID, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.tenantKey)
	resp, err := f.tenant.HTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var view struct {
		ParentRunID string `json:"parent_run_id"`
		Usage       struct {
			PromptTokens int64             `json:"prompt_tokens"`
			Children     *agentfleet.Usage `json:"children"`
		} `json:"usage"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&view))
	require.Equal(t, parent.Usage.PromptTokens, view.Usage.PromptTokens)
	require.NotNil(t, view.Usage.Children)
	require.Equal(t, childUsage, *view.Usage.Children)
	require.Positive(t, childUsage.Total())
}

// Ending a parent ends its children: a parent cancelled while it waits is
// cancelled at once, and its running children stop (their scripts
// interrupted) with an error that names it.
func TestFleetCancelledParentCancelsItsChildren(t *testing.T) {
	t.Parallel()
	f := setupFleetWith(t, fleetOptions{responder: fanOutTurns})
	parent := f.submit(wire.RunCreateRequest{Message: "fan out spin 3"})
	require.Eventually(t, func() bool {
		r, err := f.tenant.GetRun(f.ctx, parent.ID)
		return err == nil && r.Status == agentfleet.StatusWaitingChildren
	}, 30*time.Second, 20*time.Millisecond)
	_, err := f.tenant.CancelRun(f.ctx, parent.ID)
	require.NoError(t, err)
	kids, err := f.store.RunList(f.ctx, store.RunListParams{Tenant: parent.Tenant, ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 3)
	for _, k := range kids.Runs {
		k = f.wait(k.ID, 30*time.Second)
		require.Equal(t, agentfleet.StatusCancelled, k.Status)
		require.Contains(t, k.Error, "parent run "+parent.ID+" ended (cancelled)")
	}
	require.Equal(t, agentfleet.StatusCancelled, f.wait(parent.ID, time.Second).Status)
}

// A wait with a timeout ends when it times out: the children that have
// not ended are reported running; the parent goes on, and when it ends,
// the child it left running is cancelled.
func TestFleetWaitTimesOut(t *testing.T) {
	t.Parallel()
	f := setupFleetWith(t, fleetOptions{responder: fanOutTurns})
	start := time.Now()
	parent := f.wait(f.submit(wire.RunCreateRequest{Message: "wait briefly"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, parent.Status, parent.Error)
	require.JSONEq(t, `"running"`, string(parent.Answer))
	require.Less(t, time.Since(start), 10*time.Second, "the sweep ends the wait soon after its timeout")
	kids, err := f.store.RunList(f.ctx, store.RunListParams{Tenant: parent.Tenant, ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 1)
	require.Equal(t, agentfleet.StatusCancelled, f.wait(kids.Runs[0].ID, 30*time.Second).Status)
}

// A turn that spawned children and crashed before its commit runs again
// on another worker and spawns nothing twice: the children's ids come
// from the parent, the turn and the call.
func TestFleetTurnRunAgainSpawnsNothingTwice(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		if r.FirstUser() == "hold" {
			once.Do(func() { close(held); <-release })
		}
		return fanOutTurns(r)
	}
	f := setupFleetWith(t, fleetOptions{responder: responder, workers: 1})
	parent := f.submit(wire.RunCreateRequest{Message: "fan out 2 and hold"})
	<-held // the children exist; the turn has not committed
	f.crashWorker(0)
	close(release)
	f.startWorker()
	done := f.wait(parent.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.Equal(t, 2, done.Children)
	kids, err := f.store.RunList(f.ctx, store.RunListParams{Tenant: parent.Tenant, ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 2, "the turn that ran again found the children it had spawned")
	for _, k := range kids.Runs {
		f.requireOneCommitPerTurn(k)
	}
	require.Equal(t, 1, f.modelCalls("fan out 2 and hold", 1), "the parent's first reply was recorded and reused")
	require.Equal(t, 2, f.modelCalls("hold", 1), "its script ran again (the side-effect journal will make that once)")
}

// Runs waiting for their children hold no place among a tenant's
// concurrent runs: a parent of a tenant allowed one run at a time waits
// while its children run, one after the other, and completes. Children
// never join their parent's session, or they could not start until it
// ended.
func TestFleetWaitingParentDoesNotBlockItsChildren(t *testing.T) {
	t.Parallel()
	f := setupFleetWith(t, fleetOptions{responder: fanOutTurns, tenant: wire.TenantRequest{MaxConcurrentRuns: ptrTo(1)}})
	parent := f.wait(f.submit(wire.RunCreateRequest{Message: "fan out 3", SessionID: "s1"}).ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, parent.Status, parent.Error)
	require.JSONEq(t, `"completed:0,completed:1,completed:4"`, string(parent.Answer))
}

func ptrTo[T any](v T) *T { return &v }

// waitOnTurns plays scripts that wait() on ids: "wait on ID" waits on
// ID, "wait on mine and ID" on a child it spawns and ID, each answering
// what wait() threw ("waited" when it did not); "later child" spawns a
// child in turn 1 and waits for it in turn 2, an earlier turn's child.
func waitOnTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	task, turns := r.FirstUser(), assistantTurns(r)
	var script string
	switch {
	case strings.HasPrefix(task, "square "):
		return fanOutTurns(r)
	case task == "later child" && turns == 0:
		script = `function run() { return {id: spawn({message: "square 4"})} }`
	case task == "later child" && turns == 1:
		script = `function run(args) { wait([args.id]); return {} }`
	case task == "later child":
		script = `function run(args) { answer(args.children[0].status + ":" + args.children[0].answer) }`
	case strings.HasPrefix(task, "wait on ") && turns == 0:
		ids := `[` + strconvQuote(strings.TrimPrefix(task, "wait on ")) + `]`
		if rest, ok := strings.CutPrefix(task, "wait on mine and "); ok {
			ids = `[spawn({message: "square 1"}), ` + strconvQuote(rest) + `]`
		}
		script = `function run() { try { wait(` + ids + `) } catch (e) { answer("threw: " + e.message); return } return {} }`
	case strings.HasPrefix(task, "wait on "):
		script = `function run() { answer("waited") }`
	default:
		return "", usage, fmt.Errorf("unexpected task %q", task)
	}
	return "Here.\n```javascript\n" + script + "\n```", usage, nil
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// wait() takes only the run's own children: another tenant's run id, a
// random id and a list that mixes one in throw at the call, and the run
// goes on (it never parks); a child spawned in an earlier turn is waited
// for as before.
func TestFleetWaitTakesOnlyOwnChildren(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := fleetOptions{responder: waitOnTurns}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			f := setupFleetWith(t, o)
			tv, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "stranger"})
			require.NoError(t, err)
			stranger := apiClient(t, f.dispatcher.URL(), tv.APIKey)
			theirs, err := stranger.CreateRun(f.ctx, wire.RunCreateRequest{Message: "later child"})
			require.NoError(t, err)

			for _, id := range []string{theirs.ID, "0b5c3f0e-8d7a-4f7e-9a56-3c1e7d2b9f10", "not-a-run"} {
				for _, task := range []string{"wait on " + id, "wait on mine and " + id} {
					run := f.wait(f.submit(wire.RunCreateRequest{Message: task}).ID, 30*time.Second)
					require.Equal(t, agentfleet.StatusCompleted, run.Status, "%s: %s", task, run.Error)
					var answer string
					require.NoError(t, json.Unmarshal(run.Answer, &answer))
					require.Contains(t, answer, "threw: wait: \""+id+"\" is not a child of this run", task)
					require.Equal(t, 1, run.Turn, "%s: the throw came in the turn, which never parked", task)
				}
			}

			own := f.wait(f.submit(wire.RunCreateRequest{Message: "later child"}).ID, 30*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, own.Status, own.Error)
			require.JSONEq(t, `"completed:16"`, string(own.Answer))
		})
	}
}
