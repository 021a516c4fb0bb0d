package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// keyCounter is a receiver that counts the requests it gets by method
// and Idempotency-Key, and answers each with a serial number.
type keyCounter struct {
	mu   sync.Mutex
	seen map[string]int // "METHOD key" -> requests
	n    int
}

func newKeyCounter(t *testing.T) (*keyCounter, *httptest.Server) {
	t.Helper()
	k := &keyCounter{seen: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.seen[r.Method+" "+r.Header.Get("Idempotency-Key")]++
		k.n++
		n := k.n
		k.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]int{"serial": n})
	}))
	t.Cleanup(srv.Close)
	return k, srv
}

func (k *keyCounter) counts() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.seen))
	for key, n := range k.seen {
		out[key] = n
	}
	return out
}

// memJournal is a journal in memory: what the store does for the worker,
// without the store. failAt makes the record of that index fail once.
type memJournal struct {
	mu      sync.Mutex
	entries map[int]agentfleet.JournalEntry
	failAt  int
}

func newMemJournal() *memJournal {
	return &memJournal{entries: map[int]agentfleet.JournalEntry{}, failAt: -1}
}

func (m *memJournal) Replay(_ context.Context, call agentfleet.JournalEntry) (agentfleet.JournalEntry, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.entries[call.Index]
	if ok && (rec.Primitive != call.Primitive || rec.Method != call.Method || rec.URL != call.URL) {
		return rec, false, &agentfleet.JournalMismatchError{Recorded: rec, Call: call}
	}
	return rec, ok, nil
}

func (m *memJournal) Record(_ context.Context, call agentfleet.JournalEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if call.Index == m.failAt {
		m.failAt = -1
		return errors.New("store unavailable")
	}
	m.entries[call.Index] = call
	return nil
}

// sideEffects is a script with every kind of journaled call and a GET,
// which is not journaled.
const sideEffects = `function run(args) {
  const http = require("http");
  const got = http.get(args.url + "/status").json().serial;
  const a = http.post(args.url + "/orders", {n: 1}).json().serial;
  const said = ai("say yes");
  const b = fetch(args.url + "/orders/1", {method: "PUT", body: "x"}).json().serial;
  const child = spawn({message: "sub-task"});
  return {got: got > 0, a, said, b, child};
}`

// execFactory counts the ai() and spawn() calls that reach the caller.
type execFactory struct {
	mu           sync.Mutex
	ai, spawns   int
	spawnIndexes []int
}

func (f *execFactory) request(url string, j agentfleet.Journal) agentfleet.ExecRequest {
	return agentfleet.ExecRequest{
		Script: sideEffects, Args: []byte(`{"url":"` + url + `"}`), RunID: "run-1", Turn: 3, Journal: j,
		AI: func(context.Context, agentfleet.AIRequest) (agentfleet.AIResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.ai++
			return agentfleet.AIResponse{Content: "yes", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 1}}, nil
		},
		Spawn: func(_ context.Context, index int, _ agentfleet.SpawnRequest) (string, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.spawns++
			f.spawnIndexes = append(f.spawnIndexes, index)
			return "child-of-3", nil
		},
	}
}

func TestJournalReplaysRecordedCalls(t *testing.T) {
	t.Parallel()
	k, srv := newKeyCounter(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	j := newMemJournal()
	var f execFactory
	first := execute(t, p, f.request(srv.URL, j))
	want := ok(t, first)
	require.Equal(t, map[string]int{"GET ": 1, "POST run-1/3/0": 1, "PUT run-1/3/2": 1}, k.counts(),
		"GETs carry no key; journaled calls carry run/turn/index")
	require.Len(t, j.entries, 4)
	require.Equal(t, "http", j.entries[0].Primitive)
	require.Equal(t, "POST", j.entries[0].Method)
	require.Equal(t, srv.URL+"/orders", j.entries[0].URL)
	require.Equal(t, "ai", j.entries[1].Primitive)
	require.Equal(t, agentfleet.Usage{PromptTokens: 10, CompletionTokens: 1}, j.entries[1].Usage)
	require.Equal(t, "fetch", j.entries[2].Primitive)
	require.Equal(t, "spawn", j.entries[3].Primitive)
	require.Equal(t, []int{3}, f.spawnIndexes, "spawn's index is its journal index")

	// The turn executed again: only the GET goes out again, and the
	// script sees what it saw the first time.
	again := execute(t, p, f.request(srv.URL, j))
	require.JSONEq(t, want, ok(t, again))
	require.Equal(t, map[string]int{"GET ": 2, "POST run-1/3/0": 1, "PUT run-1/3/2": 1}, k.counts())
	require.Equal(t, 1, f.ai, "ai() is not called again")
	require.Equal(t, 1, f.spawns, "spawn() is not called again")
	require.Equal(t, first.AIUsage, again.AIUsage, "a replayed ai() counts its recorded usage in the turn's")
}

func TestJournalUnrecordedCallGoesOutAgainWithItsKey(t *testing.T) {
	t.Parallel()
	k, srv := newKeyCounter(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	j := newMemJournal()
	j.failAt = 2 // the PUT is sent, and its outcome lost
	var f execFactory
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Execute(ctx, f.request(srv.URL, j))
	require.ErrorContains(t, err, "journal: store unavailable", "the turn fails: its outcome is not the script's to see")
	require.Equal(t, 0, f.spawns, "nothing journaled runs after a record failed")
	require.Len(t, j.entries, 2)

	again := execute(t, p, f.request(srv.URL, j))
	ok(t, again)
	require.Equal(t, map[string]int{"GET ": 2, "POST run-1/3/0": 1, "PUT run-1/3/2": 2}, k.counts(),
		"the call whose outcome was lost goes out again with the same key")
	require.Equal(t, 1, f.ai)
	require.Len(t, j.entries, 4)
}

func TestJournalMismatchFailsTheScript(t *testing.T) {
	t.Parallel()
	_, srv := newKeyCounter(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	j := newMemJournal()
	j.entries[0] = agentfleet.JournalEntry{RunID: "run-1", Turn: 1, Index: 0, Primitive: "http", Method: "POST",
		URL: srv.URL + "/a", Result: json.RawMessage(`{"status":200,"headers":{},"body":"{}","url":"x"}`)}
	// The script catches the error: the turn fails all the same.
	res := execute(t, p, agentfleet.ExecRequest{RunID: "run-1", Turn: 1, Journal: j, Args: []byte(`{"url":"` + srv.URL + `"}`),
		Script: `function run(args) {
  try { require("http").post(args.url + "/b", "x"); } catch (e) { return "caught: " + e.message; }
  return "sent";
}`})
	msg := failed(t, res, agentfleet.ScriptException)
	require.Contains(t, msg, "not deterministic")
	require.Contains(t, msg, "http POST "+srv.URL+"/a")
	require.Contains(t, msg, "http POST "+srv.URL+"/b")
}
