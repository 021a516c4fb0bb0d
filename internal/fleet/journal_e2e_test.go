package fleet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// journalTurns plays the "journal" task: turn 1 POSTs an effect, asks
// ai(), then POSTs to /hold; turn 2 answers with what turn 1 saw.
func journalTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	switch {
	case r.FirstUser() == "journal ai":
		return "yes", agentfleet.Usage{PromptTokens: 7, CompletionTokens: 1}, nil
	case assistantTurns(r) == 0:
		return "Act.\n```javascript\nfunction run(args) {\n" +
			"  const http = require('http');\n" +
			"  const a = http.post(args.target + '/effect', {n: 1}).json().serial;\n" +
			"  const said = ai('journal ai');\n" +
			"  const b = http.post(args.target + '/hold', {}).json().serial;\n" +
			"  return {a, said, b};\n}\n```", usage, nil
	default:
		return "Report.\n```javascript\nfunction run(args) { answer(args) }\n```", usage, nil
	}
}

// effectTarget counts the POSTs it receives by path and Idempotency-Key,
// answering each path's with its own serial number. The first /hold
// answers only once release is closed.
type effectTarget struct {
	mu      sync.Mutex
	byKey   map[string]int // "path key" -> POSTs
	serials map[string]int
	held    chan struct{}
	release chan struct{}
}

// startEffectTarget serves a new effectTarget until t ends; its first
// /hold is released then, if not before.
func startEffectTarget(t *testing.T) (*effectTarget, *httptest.Server) {
	target := &effectTarget{byKey: map[string]int{}, serials: map[string]int{}, held: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(target)
	t.Cleanup(srv.Close)
	t.Cleanup(sync.OnceFunc(func() { close(target.release) }))
	return target, srv
}

func (e *effectTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.byKey[r.URL.Path+" "+r.Header.Get("Idempotency-Key")]++
	e.serials[r.URL.Path]++
	serial := e.serials[r.URL.Path]
	e.mu.Unlock()
	if r.URL.Path == "/hold" && serial == 1 {
		close(e.held)
		<-e.release
	}
	_ = json.NewEncoder(w).Encode(map[string]int{"serial": serial})
}

// A worker process SIGKILLed between a turn's journaled calls and its
// commit: the turn runs again on another worker, replays what was
// recorded (the first POST is not sent again, ai() is neither called nor
// billed again), sends again only the call whose outcome was never
// recorded, with the same Idempotency-Key, and the run answers with what
// its first attempt saw.
func TestMultiProcessJournalSurvivesWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries")
	}
	target, srv := startEffectTarget(t)
	f := startWorkerFleet(t, journalTurns)
	ctx, st := f.ctx, f.st
	run, err := f.tenant.CreateRun(ctx, wire.RunCreateRequest{Message: "journal", Context: json.RawMessage(`{"target":"` + srv.URL + `"}`)})
	require.NoError(t, err)

	select {
	case <-target.held: // /effect and ai() recorded, the turn not committed
	case <-time.After(60 * time.Second):
		t.Fatal("the script never reached /hold")
	}
	require.NoError(t, f.first.cmd.Process.Signal(syscall.SIGKILL))
	<-f.first.done
	f.startWorker("worker1")

	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done, err := f.tenant.Wait(waitCtx, run.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	all, err := f.tenant.RunSteps(ctx, run.ID, -1)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"said":"yes","b":2}`, string(done.Answer), "turn 1 ran again with what its first attempt saw; trace: %+v", all)
	target.mu.Lock()
	require.Equal(t, map[string]int{"/effect " + run.ID + "/1/0": 1, "/hold " + run.ID + "/1/2": 2}, target.byKey,
		"the recorded POST went out once; the one in flight at the kill again, with its key")
	target.mu.Unlock()
	ai := 0
	for _, r := range f.model.Received() {
		if r.FirstUser() == "journal ai" {
			ai++
		}
	}
	require.Equal(t, 1, ai, "ai() was replayed, not called again")
	rows, err := st.UsageList(ctx, store.UsageListParams{Tenant: "acme", GroupBy: "run"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.EqualValues(t, 3, rows[0].Calls, "billed once each: two turns' replies and one ai()")
	require.Equal(t, done.Usage, rows[0].Usage, "the run's usage is what was billed")

	trace, err := f.tenant.RunSteps(ctx, run.ID, 1)
	require.NoError(t, err)
	require.Len(t, trace.Journal, 3)
	var calls []string
	for _, j := range trace.Journal {
		calls = append(calls, strings.TrimSpace(j.Primitive+" "+j.Method+" "+strings.TrimPrefix(j.URL, srv.URL)))
	}
	require.Equal(t, []string{"http POST /effect", "ai", "http POST /hold"}, calls)
	require.JSONEq(t, `"yes"`, string(trace.Journal[1].Result))
}
