package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/api/apitest"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// The tests run the API against real parts: an embedded NATS server with
// JetStream, a SQLite file and the api.Server behind httptest. Nothing is
// mocked. No worker or scheduler runs, so a run stays queued unless a test
// drives it through the store, as a worker would.

const adminToken = "admin-secret"

// waitFor bounds every wait for something asynchronous (a NATS message, an
// SSE frame); the happy path never comes near it.
const waitFor = 10 * time.Second

// env is a test's view of a fixture: its helpers fail t. A subtest takes
// its own view with sub.
type env struct {
	t *testing.T
	*fixture
}

type fixture struct {
	ctx   context.Context
	store *sqlite.Store
	bus   *bus.Bus
	srv   *httptest.Server
	api   *api.Server

	// changed receives the tenant of every Config.TenantChanged call.
	changed chan string

	srcOnce sync.Once
	src     *bus.TurnSource
}

// sub is the same fixture for subtest t.
func (e *env) sub(t *testing.T) *env { return &env{t: t, fixture: e.fixture} }

// newEnv starts NATS, opens a SQLite store and serves the API over HTTP,
// all torn down when the test ends. mods adjust the api.Config.
func newEnv(t *testing.T, mods ...func(*api.Config)) *env {
	t.Helper()
	ctx := t.Context()
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "api.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e := &env{t: t, fixture: &fixture{ctx: ctx, store: st, bus: b, changed: make(chan string, 100)}}
	cfg := api.Config{
		Store: st, Bus: b, AdminToken: adminToken,
		Logger:        slog.New(slog.DiscardHandler),
		TenantChanged: func(tenant string) { e.changed <- tenant },
	}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := api.New(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	e.api = srv
	e.srv = httptest.NewServer(srv)
	t.Cleanup(e.srv.Close) // runs first: open streams end before the bus and the store close
	// Every answer the tests read is held against the OpenAPI document.
	e.srv.Client().Transport = apitest.Transport(t, e.srv.Client().Transport)
	return e
}

// lockedBuffer is a log destination the server's goroutines write while
// a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// reply is one HTTP answer, read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request as token ("" sends no Authorization header). body is
// nil (none), a string or []byte (sent as is) or anything else (sent as
// JSON). hdr is pairs of header names and values.
func (e *env) do(method, path, token string, body any, hdr ...string) reply {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(e.ctx, method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// decode asserts status and a JSON answer and decodes it into v.
func decode[T any](t *testing.T, r reply, status int) T {
	t.Helper()
	require.Equal(t, status, r.status, "answer: %s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var v T
	require.NoError(t, json.Unmarshal(r.body, &v), "answer: %s", r)
	return v
}

// requireError asserts an error answer: the status, exactly the shape
// {"error":{"code","message"}}, the code, and a message containing every
// one of want (case-insensitively).
func requireError(t *testing.T, r reply, status int, code string, want ...string) string {
	t.Helper()
	require.Equal(t, status, r.status, "answer: %s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"), "answer: %s", r)
	var shape map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &shape), "error body is not {\"error\":{...}}: %s", r.body)
	require.Len(t, shape, 1, "error body has other top-level keys: %s", r.body)
	inner, ok := shape["error"]
	require.True(t, ok, "error body has no \"error\": %s", r.body)
	require.Len(t, inner, 2, "error object is not exactly {code, message}: %s", r.body)
	var gotCode, msg string
	require.NoError(t, json.Unmarshal(inner["code"], &gotCode), "error.code: %s", r.body)
	require.NoError(t, json.Unmarshal(inner["message"], &msg), "error.message: %s", r.body)
	require.Equal(t, code, gotCode, "answer: %s", r)
	require.NotEmpty(t, msg)
	for _, w := range want {
		require.Contains(t, strings.ToLower(msg), strings.ToLower(w), "error message %q should mention %q", msg, w)
	}
	return msg
}

// tenant creates a tenant through the API and returns its API key.
func (e *env) tenant(id string) string {
	e.t.Helper()
	v := decode[wire.TenantView](e.t, e.do("POST", "/v1/tenants", adminToken, map[string]any{"id": id}), http.StatusCreated)
	require.NotEmpty(e.t, v.APIKey)
	return v.APIKey
}

// createRun submits a run and asserts 202.
func (e *env) createRun(key string, body any, hdr ...string) agentfleet.Run {
	e.t.Helper()
	return decode[agentfleet.Run](e.t, e.do("POST", "/v1/runs", key, body, hdr...), http.StatusAccepted)
}

func (e *env) getRun(key, id string) agentfleet.Run {
	e.t.Helper()
	return decode[agentfleet.Run](e.t, e.do("GET", "/v1/runs/"+id, key, nil), http.StatusOK)
}

// turns is a pull consumer on AF_RUNQ, the queue the API puts first turns
// on (nothing else consumes it in these tests).
func (e *env) turns() *bus.TurnSource {
	e.srcOnce.Do(func() {
		src, err := e.bus.TurnSource(e.ctx, bus.QueueRunQ, "apitest")
		require.NoError(e.t, err)
		e.src = src
	})
	return e.src
}

// nextTurn waits for the next turn message on AF_RUNQ and acks it.
func (e *env) nextTurn() bus.Turn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitFor)
	defer cancel()
	d, err := e.turns().Next(ctx)
	require.NoError(e.t, err, "no turn message on AF_RUNQ")
	require.NoError(e.t, d.Ack(e.ctx))
	return d.Turn
}

// queued is the number of turn messages on AF_RUNQ not yet acked. The API
// answers only after NATS acked its publish, so this is exact right after
// a request.
func (e *env) queued() uint64 {
	e.t.Helper()
	n, err := e.bus.QueueDepth(e.ctx, bus.QueueRunQ)
	require.NoError(e.t, err)
	return n
}

// liveEvents collects the events published on NATS from now on that match f.
func (e *env) liveEvents(f bus.EventFilter) <-chan agentfleet.Event {
	e.t.Helper()
	ch := make(chan agentfleet.Event, 100)
	unsub, err := e.bus.SubscribeEvents(e.ctx, f, func(ev agentfleet.Event) { ch <- ev })
	require.NoError(e.t, err)
	e.t.Cleanup(unsub)
	return ch
}

// storedEvents is a run's events as the store has them.
func (e *env) storedEvents(runID string) []agentfleet.Event {
	e.t.Helper()
	evs, err := e.store.EventListByRun(e.ctx, store.EventListByRunParams{RunID: runID})
	require.NoError(e.t, err)
	return evs
}

func eventTypes(evs []agentfleet.Event) []agentfleet.EventType {
	out := make([]agentfleet.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// start moves a queued run to running, as a worker's first turn does.
func (e *env) start(runID string) {
	e.t.Helper()
	_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{
		ID: runID, From: []agentfleet.RunStatus{agentfleet.StatusQueued}, To: agentfleet.StatusRunning,
		Events: []agentfleet.Event{{Type: agentfleet.EventStarted}},
	})
	require.NoError(e.t, err)
}

// complete starts a queued run and commits its first turn as its last,
// with an answer and usage.
func (e *env) complete(runID string) agentfleet.Run {
	e.t.Helper()
	e.start(runID)
	res, err := e.store.TurnCommit(e.ctx, store.TurnCommitParams{
		RunID: runID, Turn: 1, Status: agentfleet.StatusCompleted, Answer: json.RawMessage(`"42"`),
		Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5},
		Events: []agentfleet.Event{
			{Type: agentfleet.EventModelCall, Tokens: &agentfleet.Tokens{Prompt: 10, Completion: 5}},
			{Type: agentfleet.EventResponse, Content: "42"},
			{Type: agentfleet.EventDone, Summary: string(agentfleet.StatusCompleted)},
		},
	})
	require.NoError(e.t, err)
	return res.Run
}

// sseFrame is one Server-Sent Event.
type sseFrame struct {
	id, event, data string
}

type sseStream struct {
	t    *testing.T
	resp *http.Response
	rd   *bufio.Reader
}

// openEvents opens GET /v1/runs/{id}/events (path may carry a query) and
// asserts a 200 event stream. The stream is closed when the test ends.
func (e *env) openEvents(key, path string, hdr ...string) *sseStream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*waitFor)
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		cancel()
		require.NoError(e.t, err)
	}
	e.t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
	})
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	require.Equal(e.t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(e.t, "no-cache", resp.Header.Get("Cache-Control"))
	return &sseStream{t: e.t, resp: resp, rd: bufio.NewReader(resp.Body)}
}

// next reads the next event, skipping comments (keep-alives). It returns
// io.EOF when the server ended the stream.
func (s *sseStream) next() (sseFrame, error) {
	var f sseFrame
	seen := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && (seen || line != "") {
				return f, io.ErrUnexpectedEOF
			}
			return f, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			f.id, seen = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			f.event, seen = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			require.Empty(s.t, f.data, "an event JSON spans one data line")
			f.data, seen = strings.TrimPrefix(line, "data: "), true
		default:
			s.t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

// frame reads the next event and checks that its id, event and data agree.
func (s *sseStream) frame() agentfleet.Event {
	s.t.Helper()
	f, err := s.next()
	require.NoError(s.t, err)
	var ev agentfleet.Event
	require.NoError(s.t, json.Unmarshal([]byte(f.data), &ev), "data: %s", f.data)
	require.Equal(s.t, fmt.Sprint(ev.Seq), f.id, "id: is the event's seq")
	require.Equal(s.t, string(ev.Type), f.event, "event: is the event's type")
	return ev
}

// frames reads n events.
func (s *sseStream) frames(n int) []agentfleet.Event {
	s.t.Helper()
	out := make([]agentfleet.Event, n)
	for i := range out {
		out[i] = s.frame()
	}
	return out
}

// requireEnd asserts the server ended the stream.
func (s *sseStream) requireEnd() {
	s.t.Helper()
	f, err := s.next()
	require.ErrorIs(s.t, err, io.EOF, "expected the stream to end, got %+v", f)
}

func seqs(evs []agentfleet.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}
