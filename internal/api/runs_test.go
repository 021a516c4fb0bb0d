package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestRunCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	live := e.liveEvents(bus.EventFilter{Tenant: "acme"})

	before := time.Now().UTC()
	r := e.do("POST", "/v1/runs", key, map[string]any{"message": "summarise the news"})
	require.Equal(t, http.StatusAccepted, r.status, "answer: %s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))

	// The documented shape, field by field.
	raw := rawJSON(t, r.body)
	for _, k := range []string{"id", "tenant", "agent", "status", "message", "turns", "usage", "data_bytes_carried", "created_at", "updated_at"} {
		require.Contains(t, raw, k)
	}
	for _, k := range []string{"session_id", "answer", "error", "cancel_requested", "deadline", "context", "idempotency_key"} {
		require.NotContains(t, raw, k, "empty %s is omitted", k)
	}
	require.JSONEq(t, `{"prompt_tokens":0,"completion_tokens":0}`, string(raw["usage"]))
	require.JSONEq(t, `0`, string(raw["turns"]))
	require.JSONEq(t, `"queued"`, string(raw["status"]))
	require.JSONEq(t, `"default"`, string(raw["agent"]), "the agent defaults to \"default\"")

	run := decode[agentfleet.Run](t, r, http.StatusAccepted)
	require.NotEmpty(t, run.ID)
	require.Equal(t, "acme", run.Tenant)
	require.Equal(t, "summarise the news", run.Message)
	require.Equal(t, agentfleet.StatusQueued, run.Status)
	require.Zero(t, run.Turn)
	require.WithinRange(t, run.CreatedAt, before.Add(-time.Second), time.Now().Add(time.Second))
	require.Equal(t, run.CreatedAt, run.UpdatedAt)

	// GET returns the same run.
	got := e.getRun(key, run.ID)
	require.Equal(t, run.ID, got.ID)
	require.Equal(t, run.CreatedAt, got.CreatedAt)

	// The queued event is stored and published.
	stored := e.storedEvents(run.ID)
	require.Len(t, stored, 1)
	require.Equal(t, agentfleet.EventQueued, stored[0].Type)
	ev := bustest.Recv(t, live, "the queued event on NATS")
	require.Equal(t, agentfleet.EventQueued, ev.Type)
	require.Equal(t, run.ID, ev.RunID)
	require.Equal(t, "acme", ev.Tenant)
	require.EqualValues(t, 1, ev.Seq)
	require.Equal(t, agentfleet.EventVersion, ev.V)
	require.Equal(t, "summarise the news", ev.Content)

	// The first turn is on AF_RUNQ.
	require.EqualValues(t, 1, e.queued())
	require.Equal(t, bus.Turn{RunID: run.ID, Tenant: "acme", Turn: 1}, e.nextTurn())
}

func TestRunCreateAllFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	_, err := e.store.AgentUpsert(e.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "researcher", Spec: agentfleet.AgentSpec{Persona: "You research."}})
	require.NoError(t, err)

	before := time.Now()
	run := e.createRun(key, map[string]any{
		"agent": "researcher", "message": "find it", "session_id": "sess-1_a",
		"context":         map[string]any{"urls": []string{"https://example.com"}, "n": 3},
		"idempotency_key": "k-1", "metadata": map[string]string{"team": "blue"},
		"max_turns": 7, "max_tokens": 5000, "timeout": "90s",
	})
	require.Equal(t, "researcher", run.Agent)
	require.Equal(t, "sess-1_a", run.SessionID)
	require.JSONEq(t, `{"urls":["https://example.com"],"n":3}`, string(run.Context))
	require.Equal(t, "k-1", run.IdempotencyKey)
	require.Equal(t, map[string]string{"team": "blue"}, run.Metadata)
	require.Equal(t, 7, run.MaxTurns)
	require.EqualValues(t, 5000, run.MaxTokens)
	require.WithinRange(t, run.Deadline, before.Add(89*time.Second), time.Now().Add(91*time.Second))

	// The session's first run may start at once.
	require.Equal(t, bus.Turn{RunID: run.ID, Tenant: "acme", Turn: 1}, e.nextTurn())
	evs := e.storedEvents(run.ID)
	require.Len(t, evs, 1)
	require.Equal(t, "sess-1_a", evs[0].SessionID)

	// Any JSON value is a context.
	for _, c := range []string{`"text"`, `[1,2]`, `42`, `true`} {
		r := e.createRun(key, `{"message":"m","context":`+c+`}`)
		require.JSONEq(t, c, string(r.Context))
	}
}

func TestRunCreateValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	long := strings.Repeat("s", 65)
	meta := map[string]string{}
	for i := range 65 {
		meta[fmt.Sprint("k", i)] = "v"
	}
	metaJSON, _ := json.Marshal(meta)
	cases := []struct {
		name   string
		body   string
		status int
		want   []string
	}{
		// 400: not the JSON the endpoint reads.
		{"malformed", `{"message":`, 400, []string{"malformed JSON"}},
		{"syntax error", `{"message": "x",}`, 400, []string{"malformed JSON", "byte"}},
		{"not JSON", `message=hello`, 400, []string{"malformed JSON"}},
		{"empty body", ``, 400, []string{"body is empty"}},
		{"only whitespace", "  \n", 400, []string{"body is empty"}},
		{"array body", `["hello"]`, 400, []string{"JSON object", "array"}},
		{"string body", `"hello"`, 400, []string{"JSON object", "string"}},
		{"message is a number", `{"message": 5}`, 400, []string{`"message"`, "a string", "number"}},
		{"message is an object", `{"message": {"text":"x"}}`, 400, []string{`"message"`, "a string", "object"}},
		{"max_turns is a string", `{"message":"x","max_turns":"5"}`, 400, []string{`"max_turns"`, "integer"}},
		{"max_turns is fractional", `{"message":"x","max_turns":1.5}`, 400, []string{`"max_turns"`, "integer"}},
		{"max_tokens is a bool", `{"message":"x","max_tokens":true}`, 400, []string{`"max_tokens"`, "integer"}},
		{"metadata value not a string", `{"message":"x","metadata":{"a":1}}`, 400, []string{`"metadata"`, "values are each a string", "number"}},
		{"metadata is a list", `{"message":"x","metadata":["a"]}`, 400, []string{`"metadata"`, "an object"}},
		{"unknown field", `{"message":"x","agnet":"a"}`, 400, []string{`unknown field "agnet"`}},
		{"trailing object", `{"message":"x"} {"message":"y"}`, 400, []string{"after the JSON object"}},
		{"trailing brace", `{"message":"x"}}`, 400, []string{"after the JSON object"}},
		{"trailing garbage", `{"message":"x"} x`, 400, []string{"after the JSON object"}},
		{"context not JSON", `{"message":"x","context":{bad}}`, 400, []string{"malformed JSON"}},
		// 422: well-formed, but not a run we can take.
		{"no message", `{}`, 422, []string{"message is required"}},
		{"null body", `null`, 422, []string{"message is required"}},
		{"blank message", `{"message":" \n\t "}`, 422, []string{"message is required"}},
		{"message too long", `{"message":"` + strings.Repeat("m", 256<<10+1) + `"}`, 422, []string{"message is", "limit", "context"}},
		{"unknown agent", `{"message":"x","agent":"nobody"}`, 422, []string{`unknown agent "nobody"`, `"default"`}},
		{"invalid agent name", `{"message":"x","agent":"a.b"}`, 422, []string{`agent "a.b" is not a valid name`}},
		{"session with a dot", `{"message":"x","session_id":"a.b"}`, 422, []string{`session_id "a.b" is not valid`, "letters, digits"}},
		{"session with a space", `{"message":"x","session_id":"x y"}`, 422, []string{`session_id "x y"`}},
		{"session with a wildcard", `{"message":"x","session_id":"a*"}`, 422, []string{`session_id "a*"`}},
		{"session too long", `{"message":"x","session_id":"` + long + `"}`, 422, []string{"session_id", "up to 64"}},
		{"negative max_turns", `{"message":"x","max_turns":-1}`, 422, []string{"max_turns", "between 0"}},
		{"max_turns too big", `{"message":"x","max_turns":1001}`, 422, []string{"max_turns", "1000"}},
		{"negative max_tokens", `{"message":"x","max_tokens":-5}`, 422, []string{"max_tokens must not be negative"}},
		{"timeout not a duration", `{"message":"x","timeout":"soon"}`, 422, []string{`timeout "soon"`, "90s"}},
		{"timeout without unit", `{"message":"x","timeout":"90"}`, 422, []string{`timeout "90"`}},
		{"negative timeout", `{"message":"x","timeout":"-5s"}`, 422, []string{`timeout "-5s"`, "positive"}},
		{"zero timeout", `{"message":"x","timeout":"0s"}`, 422, []string{`timeout "0s"`}},
		{"idempotency key too long", `{"message":"x","idempotency_key":"` + strings.Repeat("k", 201) + `"}`, 422, []string{"idempotency_key", "200"}},
		{"too much metadata", `{"message":"x","metadata":` + string(metaJSON) + `}`, 422, []string{"metadata has 65 keys", "64"}},
		// U+0000 cannot be stored (PostgreSQL refuses it in text and
		// jsonb): each field that holds one is named.
		{"NUL in message", `{"message":"x\u0000y"}`, 422, []string{"message contains U+0000"}},
		{"NUL in metadata value", `{"message":"x","metadata":{"team":"a\u0000"}}`, 422, []string{`metadata value of "team" contains U+0000`}},
		{"NUL in metadata key", `{"message":"x","metadata":{"t\u0000":"a"}}`, 422, []string{`metadata key`, "contains U+0000"}},
		{"NUL in context", `{"message":"x","context":{"doc":"\u0000"}}`, 422, []string{"context contains U+0000"}},
		{"NUL in idempotency key", `{"message":"x","idempotency_key":"k\u0000"}`, 422, []string{"idempotency key contains U+0000"}},
		// 413: over 1 MiB, whatever it holds.
		{"body over 1 MiB", `{"message":"x","context":"` + strings.Repeat("c", 1<<20) + `"}`, 413, []string{"exceeds 1048576 bytes"}},
	}
	codes := map[int]string{400: "bad_request", 413: "payload_too_large", 422: "unprocessable"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := e.sub(t)
			requireError(t, e.do("POST", "/v1/runs", key, c.body), c.status, codes[c.status], c.want...)
		})
	}
	// The header is checked like the body field.
	requireError(t, e.do("POST", "/v1/runs", key, `{"message":"x"}`, "Idempotency-Key", strings.Repeat("k", 201)),
		422, "unprocessable", "idempotency_key")

	// None of them created a run or queued a turn.
	l := decode[wire.RunList](t, e.do("GET", "/v1/runs", key, nil), http.StatusOK)
	require.Empty(t, l.Runs)
	require.Zero(t, e.queued())
}

func TestRunCreateIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyA, keyB := e.tenant("acme"), e.tenant("globex")

	first := e.createRun(keyA, map[string]any{"message": "once", "idempotency_key": "order-17"})
	again := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", keyA, map[string]any{"message": "once", "idempotency_key": "order-17"}), http.StatusOK)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, first.CreatedAt, again.CreatedAt)
	require.Len(t, e.storedEvents(first.ID), 1, "no second queued event")
	require.EqualValues(t, 1, e.queued(), "no second turn message")
	require.Equal(t, first.ID, e.nextTurn().RunID)

	// The Idempotency-Key header works the same way.
	hdr := e.createRun(keyA, `{"message":"by header"}`, "Idempotency-Key", "order-18")
	require.Equal(t, "order-18", hdr.IdempotencyKey)
	hdrAgain := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", keyA, `{"message":"by header"}`, "Idempotency-Key", "order-18"), http.StatusOK)
	require.Equal(t, hdr.ID, hdrAgain.ID)
	// ...and the body field and the header name the same key.
	viaBody := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", keyA, map[string]any{"message": "by header", "idempotency_key": "order-18"}), http.StatusOK)
	require.Equal(t, hdr.ID, viaBody.ID)
	// The body field wins over the header.
	both := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", keyA, map[string]any{"message": "once", "idempotency_key": "order-17"}, "Idempotency-Key", "order-99"), http.StatusOK)
	require.Equal(t, first.ID, both.ID)
	require.EqualValues(t, 1, e.queued())
	require.Equal(t, hdr.ID, e.nextTurn().RunID)

	// Without a key every submission is a new run.
	n1 := e.createRun(keyA, map[string]any{"message": "same"})
	n2 := e.createRun(keyA, map[string]any{"message": "same"})
	require.NotEqual(t, n1.ID, n2.ID)

	// Keys are per tenant.
	other := e.createRun(keyB, map[string]any{"message": "once", "idempotency_key": "order-17"})
	require.NotEqual(t, first.ID, other.ID)
	require.Equal(t, "globex", other.Tenant)

	// A repeat of a run that has ended answers with it as it is now and
	// queues nothing.
	for range 2 {
		e.nextTurn() // n1, n2
	}
	require.Equal(t, other.ID, e.nextTurn().RunID)
	e.complete(first.ID)
	done := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", keyA, map[string]any{"message": "once", "idempotency_key": "order-17"}), http.StatusOK)
	require.Equal(t, agentfleet.StatusCompleted, done.Status)
	require.JSONEq(t, `"42"`, string(done.Answer))
	require.Zero(t, e.queued())
}

// TestRunCreateIdempotencyConcurrent: racing submissions with one key make
// one run and one turn message.
func TestRunCreateIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	const n = 8
	var wg sync.WaitGroup
	replies := make([]reply, n)
	for i := range n {
		wg.Go(func() {
			replies[i] = e.do("POST", "/v1/runs", key, map[string]any{"message": "race", "idempotency_key": "k"})
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	created := 0
	for _, r := range replies {
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.status, "answer: %s", r)
		if r.status == http.StatusAccepted {
			created++
		}
		var run agentfleet.Run
		require.NoError(t, json.Unmarshal(r.body, &run))
		ids[run.ID] = true
	}
	require.Equal(t, 1, created)
	require.Len(t, ids, 1)
	require.EqualValues(t, 1, e.queued())
}

// TestRunCreateSession: runs of one session run one at a time: a later
// run gets its first turn only when the one before it ended.
func TestRunCreateSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	first := e.createRun(key, map[string]any{"message": "one", "session_id": "s1"})
	second := e.createRun(key, map[string]any{"message": "two", "session_id": "s1"})
	third := e.createRun(key, map[string]any{"message": "three", "session_id": "s1"})
	elsewhere := e.createRun(key, map[string]any{"message": "other", "session_id": "s2"})
	require.Equal(t, agentfleet.StatusQueued, second.Status)
	require.Len(t, e.storedEvents(second.ID), 1, "a waiting run has its queued event")

	require.EqualValues(t, 2, e.queued(), "only the heads of s1 and s2")
	require.Equal(t, first.ID, e.nextTurn().RunID)
	require.Equal(t, elsewhere.ID, e.nextTurn().RunID)
	require.Zero(t, e.queued())

	// A repeat of the waiting run's submission does not start it either.
	// (It has no idempotency key, so submit a keyed one to check that.)
	keyed := e.createRun(key, map[string]any{"message": "four", "session_id": "s1", "idempotency_key": "k4"})
	decode[agentfleet.Run](t, e.do("POST", "/v1/runs", key, map[string]any{"message": "four", "session_id": "s1", "idempotency_key": "k4"}), http.StatusOK)
	require.Zero(t, e.queued())

	// Cancelling the head through the API hands the session to the next.
	c := decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+first.ID+"/cancel", key, nil), http.StatusAccepted)
	require.Equal(t, agentfleet.StatusCancelled, c.Status)
	require.Equal(t, bus.Turn{RunID: second.ID, Tenant: "acme", Turn: 1}, e.nextTurn())
	require.Zero(t, e.queued())

	// Cancelling a run that is not the head starts nothing.
	decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+keyed.ID+"/cancel", key, nil), http.StatusAccepted)
	require.Zero(t, e.queued())
	require.Equal(t, agentfleet.StatusQueued, e.getRun(key, third.ID).Status)
}

func TestRunGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	run := e.createRun(key, map[string]any{"message": "m"})
	done := e.complete(run.ID)

	r := e.do("GET", "/v1/runs/"+run.ID, key, nil)
	got := decode[agentfleet.Run](t, r, http.StatusOK)
	require.Equal(t, agentfleet.StatusCompleted, got.Status)
	require.Equal(t, 1, got.Turn)
	require.JSONEq(t, `"42"`, string(got.Answer))
	require.Equal(t, agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, got.Usage)
	require.Equal(t, done.UpdatedAt, got.UpdatedAt)
	raw := rawJSON(t, r.body)
	require.JSONEq(t, `{"prompt_tokens":10,"completion_tokens":5}`, string(raw["usage"]))
	require.JSONEq(t, `1`, string(raw["turns"]))

	requireError(t, e.do("GET", "/v1/runs/does-not-exist", key, nil), http.StatusNotFound, "not_found", `no run "does-not-exist"`)
}

func TestRunList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	_, err := e.store.AgentUpsert(e.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "researcher", Spec: agentfleet.AgentSpec{Persona: "p"}})
	require.NoError(t, err)

	// Empty is an empty list, not null.
	r := e.do("GET", "/v1/runs", key, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"runs":[]}`, string(r.body))

	var all []string // newest first
	add := func(body map[string]any) agentfleet.Run {
		run := e.createRun(key, body)
		all = append([]string{run.ID}, all...)
		return run
	}
	d1 := add(map[string]any{"message": "1"})
	d2 := add(map[string]any{"message": "2"})
	r1 := add(map[string]any{"message": "3", "agent": "researcher"})
	s1 := add(map[string]any{"message": "4", "session_id": "s1"})
	s2 := add(map[string]any{"message": "5", "session_id": "s1", "agent": "researcher"})
	decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+d2.ID+"/cancel", key, nil), http.StatusAccepted)
	e.complete(d1.ID)
	e.start(r1.ID)

	list := func(q string) []string {
		t.Helper()
		l := decode[wire.RunList](t, e.do("GET", "/v1/runs"+q, key, nil), http.StatusOK)
		require.Empty(t, l.NextCursor, "query %q", q)
		return runIDs(l.Runs)
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"", all},
		{"?status=queued", []string{s2.ID, s1.ID}},
		{"?status=cancelled", []string{d2.ID}},
		{"?status=running", []string{r1.ID}},
		{"?status=completed,cancelled", []string{d2.ID, d1.ID}},
		{"?status=completed,%20cancelled", []string{d2.ID, d1.ID}},
		{"?status=max_turns", []string{}},
		{"?agent=researcher", []string{s2.ID, r1.ID}},
		{"?agent=default", []string{s1.ID, d2.ID, d1.ID}},
		{"?agent=nobody", []string{}},
		{"?session_id=s1", []string{s2.ID, s1.ID}},
		{"?session_id=s1&agent=researcher", []string{s2.ID}},
		{"?session_id=s1&status=running", []string{}},
		{"?limit=500", all},
	} {
		require.Equal(t, c.want, list(c.q), "query %q", c.q)
	}

	for _, q := range []string{"?limit=0", "?limit=501", "?limit=x", "?limit=-1", "?limit=1.5"} {
		requireError(t, e.do("GET", "/v1/runs"+q, key, nil), http.StatusBadRequest, "bad_request", "limit must be a number from 1 to 500")
	}
	for _, q := range []string{"?status=bogus", "?status=queued,bogus", "?status=QUEUED"} {
		requireError(t, e.do("GET", "/v1/runs"+q, key, nil), http.StatusBadRequest, "bad_request", "unknown status")
	}
	oldest := base64.RawURLEncoding.EncodeToString([]byte("o5"))
	for _, q := range []string{"?cursor=!!!", "?cursor=abc", "?cursor=" + oldest} {
		requireError(t, e.do("GET", "/v1/runs"+q, key, nil), http.StatusBadRequest, "bad_request", "cursor", "next_cursor")
	}
}

func TestRunListPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyA, keyB := e.tenant("acme"), e.tenant("globex")
	const n = 11
	var want []string
	for i := range n {
		run := e.createRun(keyA, map[string]any{"message": fmt.Sprint("run ", i)})
		want = append([]string{run.ID}, want...)
		e.createRun(keyB, map[string]any{"message": "noise"}) // interleaved, never listed
	}
	for _, limit := range []int{1, 3, 4, 5, 10, 11, 12} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			e := e.sub(t)
			var got []string
			cursor, pages := "", 0
			for {
				q := fmt.Sprintf("/v1/runs?limit=%d", limit)
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				l := decode[wire.RunList](t, e.do("GET", q, keyA, nil), http.StatusOK)
				pages++
				require.LessOrEqual(t, len(l.Runs), limit)
				got = append(got, runIDs(l.Runs)...)
				if l.NextCursor == "" {
					break
				}
				require.Len(t, l.Runs, limit, "only the last page is short")
				cursor = l.NextCursor
				require.LessOrEqual(t, pages, n, "pagination does not end")
			}
			require.Equal(t, want, got, "every run once, newest first")
			require.Equal(t, (n+limit-1)/limit, pages)
		})
	}
	// A cursor works with filters too.
	l := decode[wire.RunList](t, e.do("GET", "/v1/runs?limit=2&status=queued", keyA, nil), http.StatusOK)
	require.Equal(t, want[:2], runIDs(l.Runs))
	l = decode[wire.RunList](t, e.do("GET", "/v1/runs?limit=2&status=queued&cursor="+l.NextCursor, keyA, nil), http.StatusOK)
	require.Equal(t, want[2:4], runIDs(l.Runs))
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")

	t.Run("queued is cancelled at once", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		live := e.liveEvents(bus.EventFilter{Tenant: "acme", RunID: run.ID})
		r := e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil)
		got := decode[agentfleet.Run](t, r, http.StatusAccepted)
		require.Equal(t, agentfleet.StatusCancelled, got.Status)
		require.Equal(t, "cancelled by request", got.Error)
		evs := e.storedEvents(run.ID)
		require.Equal(t, []agentfleet.EventType{agentfleet.EventQueued, agentfleet.EventCancelled, agentfleet.EventDone}, eventTypes(evs))
		require.Equal(t, []int64{1, 2, 3}, seqs(evs))
		require.Equal(t, string(agentfleet.StatusCancelled), evs[2].Summary)
		// Both are published.
		require.Equal(t, agentfleet.EventCancelled, bustest.Recv(t, live, "cancelled event").Type)
		require.Equal(t, agentfleet.EventDone, bustest.Recv(t, live, "done event").Type)
		require.Equal(t, agentfleet.StatusCancelled, e.getRun(key, run.ID).Status)

		// Cancelling twice is fine and changes nothing.
		again := decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusAccepted)
		require.Equal(t, agentfleet.StatusCancelled, again.Status)
		require.Len(t, e.storedEvents(run.ID), 3)
	})

	t.Run("parked is cancelled at once", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.start(run.ID)
		_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusWaitingBudget,
			Events: []agentfleet.Event{{Type: agentfleet.EventBudgetWaiting}}})
		require.NoError(t, err)
		got := decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusAccepted)
		require.Equal(t, agentfleet.StatusCancelled, got.Status)
		require.Equal(t, agentfleet.EventDone, e.storedEvents(run.ID)[4].Type)
	})

	t.Run("completed is a conflict", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.complete(run.ID)
		requireError(t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusConflict, "conflict",
			"already ended", "completed")
		require.Equal(t, agentfleet.StatusCompleted, e.getRun(key, run.ID).Status)
		require.Len(t, e.storedEvents(run.ID), 5, "no cancel events")
	})

	t.Run("running is asked to stop", func(t *testing.T) {
		e := e.sub(t)
		run := e.createRun(key, map[string]any{"message": "m"})
		e.start(run.ID)
		type ctl struct{ tenant, run, verb string }
		ctls := make(chan ctl, 10)
		unsub, err := e.bus.SubscribeControl(func(tenant, runID, verb string) { ctls <- ctl{tenant, runID, verb} })
		require.NoError(t, err)
		defer unsub()

		got := decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusAccepted)
		require.Equal(t, agentfleet.StatusRunning, got.Status, "it stops at the next turn boundary")
		require.True(t, got.CancelRequested)
		require.Equal(t, ctl{"acme", run.ID, bus.VerbCancel}, bustest.Recv(t, ctls, "the cancel control message"))
		require.Equal(t, []agentfleet.EventType{agentfleet.EventQueued, agentfleet.EventStarted}, eventTypes(e.storedEvents(run.ID)))
		require.True(t, e.getRun(key, run.ID).CancelRequested)

		// Asking again asks again.
		got = decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+run.ID+"/cancel", key, nil), http.StatusAccepted)
		require.True(t, got.CancelRequested)
		require.Equal(t, ctl{"acme", run.ID, bus.VerbCancel}, bustest.Recv(t, ctls, "the second cancel control message"))
	})

	t.Run("unknown run", func(t *testing.T) {
		e := e.sub(t)
		requireError(t, e.do("POST", "/v1/runs/nope/cancel", key, nil), http.StatusNotFound, "not_found", `no run "nope"`)
	})
}

func TestRunCreateQueueCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := decode[wire.TenantView](t, e.do("POST", "/v1/tenants", adminToken, map[string]any{"id": "acme", "max_queued_runs": 2}), http.StatusCreated)
	require.Equal(t, 2, v.MaxQueuedRuns)
	key := v.APIKey

	first := e.createRun(key, map[string]any{"message": "one", "idempotency_key": "order-1"})
	e.createRun(key, map[string]any{"message": "two"})
	r := e.do("POST", "/v1/runs", key, map[string]any{"message": "three"})
	requireError(t, r, http.StatusTooManyRequests, "too_many_runs",
		"2 runs not finished", "at most 2", "max_queued_runs", "wait for some to end")
	require.Equal(t, "5", r.header.Get("Retry-After"))
	l := decode[wire.RunList](t, e.do("GET", "/v1/runs", key, nil), http.StatusOK)
	require.Len(t, l.Runs, 2, "the refused run was not recorded")
	require.EqualValues(t, 2, e.queued(), "nor queued")

	// A resubmission of an admitted run is answered as always.
	again := decode[agentfleet.Run](t, e.do("POST", "/v1/runs", key, map[string]any{"message": "one", "idempotency_key": "order-1"}), http.StatusOK)
	require.Equal(t, first.ID, again.ID)

	// A run that ends makes room.
	e.complete(first.ID)
	e.createRun(key, map[string]any{"message": "three"})
	requireError(t, e.do("POST", "/v1/runs", key, map[string]any{"message": "four"}), http.StatusTooManyRequests, "too_many_runs")

	// The cap is the tenant's setting.
	requireError(t, e.do("PUT", "/v1/tenants/acme", adminToken, map[string]any{"max_queued_runs": -1}), 422, "unprocessable",
		"max_queued_runs must not be negative")
	v = decode[wire.TenantView](t, e.do("PUT", "/v1/tenants/acme", adminToken, map[string]any{"max_queued_runs": 3}), http.StatusOK)
	require.Equal(t, 3, v.MaxQueuedRuns)
	e.createRun(key, map[string]any{"message": "four"})
	v = decode[wire.TenantView](t, e.do("PUT", "/v1/tenants/acme", adminToken, map[string]any{"max_queued_runs": 0}), http.StatusOK)
	require.Equal(t, store.MaxQueuedRunsDefault, v.MaxQueuedRuns, "0: the default")
}
