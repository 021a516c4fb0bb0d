package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// jsonl is n inputs as JSONL: "task i", custom id "c<i>".
func jsonl(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"message":"task %d","custom_id":"c%d","metadata":{"row":"%d"}}`+"\n", i, i, i)
	}
	return b.String()
}

func (e *env) submitBatch(key, query, body string, status int, hdr ...string) wire.Batch {
	e.t.Helper()
	return decode[wire.Batch](e.t, e.do("POST", "/v1/batches"+query, key, body, append([]string{"Content-Type", "application/x-ndjson"}, hdr...)...), status)
}

func (e *env) batch(key, id string) wire.Batch {
	e.t.Helper()
	return decode[wire.Batch](e.t, e.do("GET", "/v1/batches/"+id, key, nil), http.StatusOK)
}

func (e *env) results(key, id, query string) []wire.BatchResult {
	e.t.Helper()
	r := e.do("GET", "/v1/batches/"+id+"/results"+query, key, nil)
	require.Equal(e.t, http.StatusOK, r.status, r.String())
	require.Equal(e.t, "application/x-ndjson", r.header.Get("Content-Type"))
	var out []wire.BatchResult
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		var res wire.BatchResult
		require.NoError(e.t, json.Unmarshal(sc.Bytes(), &res))
		out = append(out, res)
	}
	return out
}

// batchRuns is a batch's runs in input order, as the store has them.
func (e *env) batchRuns(id string) []store.BatchRun {
	e.t.Helper()
	runs, err := e.store.BatchRunList(e.ctx, store.BatchRunListParams{ID: id, AfterIndex: -1})
	require.NoError(e.t, err)
	return runs
}

// liveBatchEvents collects tenant's batch events published from now on.
func (e *env) liveBatchEvents(tenant string) <-chan wire.BatchEvent {
	e.t.Helper()
	ch := make(chan wire.BatchEvent, 100)
	unsub, err := e.bus.SubscribeBatchEvents(e.ctx, tenant, "", func(ev wire.BatchEvent) { ch <- ev })
	require.NoError(e.t, err)
	e.t.Cleanup(unsub)
	return ch
}

func (e *env) tenantRuns(tenant string) map[agentfleet.RunStatus]int {
	e.t.Helper()
	counts, err := e.store.RunCountByStatus(e.ctx, tenant)
	require.NoError(e.t, err)
	return counts
}

// TestBatchCreateJSONLAndResults: a JSONL batch is admitted whole, each
// run's queued event and first turn published, and its results come back
// in input order with custom_id and metadata, resumable with ?after=.
func TestBatchCreateJSONLAndResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	live := e.liveEvents(bus.EventFilter{Tenant: "acme"})
	body := jsonl(2) + "\n" + `{"message":"task 2","custom_id":"c2","metadata":{"row":"2"}}` + "\n"
	b := e.submitBatch(key, "?max_turns=3&metadata.source=csv", body, http.StatusAccepted)
	require.Equal(t, 3, b.Total)
	require.Equal(t, "running", b.Status)
	require.Equal(t, map[string]string{"source": "csv"}, b.Metadata)
	require.EqualValues(t, 3, e.queued(), "every run's first turn is queued")
	for range 3 {
		ev := bustest.Recv(t, live, "a queued event")
		require.Equal(t, agentfleet.EventQueued, ev.Type)
	}

	got := e.batch(key, b.ID)
	require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusQueued: 3}, got.Counts)
	require.NotNil(t, got.Usage)

	runs := e.batchRuns(b.ID)
	e.complete(runs[1].Run.ID)
	res := e.results(key, b.ID, "")
	require.Len(t, res, 3)
	for i, r := range res {
		require.Equal(t, i, r.Index)
		require.Equal(t, fmt.Sprintf("c%d", i), r.CustomID)
		require.Equal(t, map[string]string{"row": fmt.Sprint(i)}, r.Metadata)
		require.Equal(t, runs[i].Run.ID, r.RunID)
	}
	require.Equal(t, agentfleet.StatusCompleted, res[1].Status)
	require.JSONEq(t, `"42"`, string(res[1].Answer))
	require.Equal(t, agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, res[1].Usage)
	after := e.results(key, b.ID, "?after=0")
	require.Len(t, after, 2)
	require.Equal(t, 1, after[0].Index)
	require.Equal(t, 3, e.batch(key, b.ID).Total)
	require.Equal(t, 3, runs[0].Run.MaxTurns)

	// Another tenant sees nothing of it.
	other := e.tenant("other")
	requireError(t, e.do("GET", "/v1/batches/"+b.ID, other, nil), http.StatusNotFound, "not_found")
	list := decode[wire.BatchList](t, e.do("GET", "/v1/batches", key, nil), http.StatusOK)
	require.Len(t, list.Batches, 1)
	require.Empty(t, decode[wire.BatchList](t, e.do("GET", "/v1/batches", other, nil), http.StatusOK).Batches)
}

// TestBatchRefusalsLeaveNothing: a malformed line is 400, an invalid
// input 422 and an input whose idempotency key is an existing run's 409,
// each naming its 1-based line, and no run of the refused batch exists.
func TestBatchRefusalsLeaveNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	run := e.createRun(key, map[string]any{"message": "hi", "idempotency_key": "k1"})
	before := e.tenantRuns("acme")
	big := jsonl(2500) // several chunks reach the store before the bad line

	cases := []struct {
		name, body string
		status     int
		code, want string
	}{
		{"malformed", big + `{"message": "oops"` + "\n", http.StatusBadRequest, "bad_request", "line 2501"},
		{"not an object", jsonl(1) + "[1]\n", http.StatusBadRequest, "bad_request", "line 2"},
		{"unknown field", jsonl(1) + `{"mesage":"x"}` + "\n", http.StatusBadRequest, "bad_request", `line 2: unknown field "mesage"`},
		{"empty message", big + `{"message":"  "}` + "\n", http.StatusUnprocessableEntity, "unprocessable", "line 2501: message is required"},
		{"bad session", "\n" + `{"message":"x","session_id":"a b"}` + "\n", http.StatusUnprocessableEntity, "unprocessable", "line 2: session_id"},
		{"existing run's key", jsonl(1) + `{"message":"x","idempotency_key":"k1"}` + "\n", http.StatusConflict, "conflict", "line 2: idempotency_key \"k1\" is that of run " + run.ID},
		{"repeated key", `{"message":"x","idempotency_key":"d"}` + "\n" + `{"message":"y","idempotency_key":"d"}` + "\n", http.StatusConflict, "conflict", "line 2: idempotency_key repeats that of input 0"},
		{"no inputs", "\n\n", http.StatusUnprocessableEntity, "unprocessable", "no inputs"},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/batches", key, c.body, "Content-Type", "application/x-ndjson")
		requireError(t, r, c.status, c.code, c.want)
		require.Equal(t, before, e.tenantRuns("acme"), "%s: no run of the batch exists", c.name)
	}
	require.Empty(t, decode[wire.BatchList](t, e.do("GET", "/v1/batches", key, nil), http.StatusOK).Batches)

	// JSON bodies: the settings that apply to every input come first.
	requireError(t, e.do("POST", "/v1/batches", key, `{"inputs":[{"message":"a"}],"agent":"default"}`), http.StatusBadRequest, "bad_request",
		`"agent" comes after inputs`)
	requireError(t, e.do("POST", "/v1/batches", key, `{"inputs":[{"message":"a"},{"message":""}]}`), http.StatusUnprocessableEntity,
		"unprocessable", "input 2 (inputs[1]): message is required")
	requireError(t, e.do("POST", "/v1/batches", key, `{"agent":"nobody","inputs":[{"message":"a"}]}`), http.StatusUnprocessableEntity,
		"unprocessable", `unknown agent "nobody"`)
	requireError(t, e.do("POST", "/v1/batches", key, "x", "Content-Type", "text/csv"), http.StatusUnsupportedMediaType, "unsupported_media_type")
	require.Equal(t, before, e.tenantRuns("acme"))
}

// TestBatchJSONBodyAndIdempotency: a JSON body with settings on both
// sides of its inputs; the batch's idempotency key, in the body or the
// header, returns the first batch.
func TestBatchJSONBodyAndIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	body := `{"agent":"default","idempotency_key":"nightly","inputs":[{"message":"a","custom_id":"x"},{"message":"b"}],"max_concurrent":1,"metadata":{"k":"v"}}`
	b := decode[wire.Batch](t, e.do("POST", "/v1/batches", key, body), http.StatusAccepted)
	require.Equal(t, 2, b.Total)
	require.Equal(t, 1, b.MaxConcurrent)
	require.Equal(t, map[string]string{"k": "v"}, b.Metadata)
	require.EqualValues(t, 1, e.queued(), "max_concurrent 1: one first turn")
	again := decode[wire.Batch](t, e.do("POST", "/v1/batches", key, body), http.StatusOK)
	require.Equal(t, b.ID, again.ID)

	h := e.submitBatch(key, "", jsonl(2), http.StatusAccepted, "Idempotency-Key", "hdr")
	require.Equal(t, h.ID, e.submitBatch(key, "", jsonl(5), http.StatusOK, "Idempotency-Key", "hdr").ID)
	require.Equal(t, 2, e.batch(key, h.ID).Total, "the repeat admitted nothing")
	require.Equal(t, 4, e.tenantRuns("acme")[agentfleet.StatusQueued])
}

// TestBatchMaxConcurrent: only max_concurrent runs are released; each end
// releases the next, the stranded sweep leaves the held ones alone, and
// the sweep finishes the batch with a done event.
func TestBatchMaxConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	b := e.submitBatch(key, "?max_concurrent=2", jsonl(5), http.StatusAccepted)
	require.EqualValues(t, 2, e.queued())
	runs := e.batchRuns(b.ID)
	// Held runs are not stranded, however old (the released ones have
	// their turns waiting).
	stranded, err := maintain.NewStranded(maintain.StrandedConfig{Store: e.store, Bus: e.bus})
	require.NoError(t, err)
	n, err := stranded.Requeue(e.ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 2, e.queued())
	first := []string{e.nextTurn().RunID, e.nextTurn().RunID}
	sweep := maintain.NewBatches(maintain.BatchesConfig{Store: e.store, Bus: e.bus})
	require.ElementsMatch(t, []string{runs[0].Run.ID, runs[1].Run.ID}, first)

	// A run's end (its RunFamilySettle missed, as after a crash) releases the
	// next through the sweep.
	e.complete(runs[0].Run.ID)
	require.NoError(t, sweep.Pass(e.ctx))
	next := e.nextTurn()
	require.Equal(t, runs[2].Run.ID, next.RunID)
	require.True(t, next.Batch, "a batch run's turn is marked for the scheduler")
	require.NoError(t, sweep.Pass(e.ctx))
	require.Zero(t, e.queued(), "two in flight: nothing more")

	for _, i := range []int{1, 2} {
		e.complete(runs[i].Run.ID)
	}
	require.NoError(t, sweep.Pass(e.ctx))
	require.ElementsMatch(t, []string{runs[3].Run.ID, runs[4].Run.ID}, []string{e.nextTurn().RunID, e.nextTurn().RunID})
	done := e.liveBatchEvents("acme")
	for _, i := range []int{3, 4} {
		e.complete(runs[i].Run.ID)
	}
	require.NoError(t, sweep.Pass(e.ctx))
	got := e.batch(key, b.ID)
	require.Equal(t, "completed", got.Status)
	require.NotNil(t, got.FinishedAt)
	require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 5}, got.Counts)
	ev := bustest.Recv(t, done, "the batch's done event")
	require.Equal(t, wire.BatchEventDone, ev.Type)
	require.Equal(t, 5, ev.Counts[agentfleet.StatusCompleted])
}

// TestBatchCancelAndRetry: cancel cancels every run not ended and is
// idempotent; retry submits the failed inputs again as a new batch, once.
func TestBatchCancelAndRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	b := e.submitBatch(key, "", jsonl(6), http.StatusAccepted)
	runs := e.batchRuns(b.ID)
	e.complete(runs[0].Run.ID)
	e.start(runs[1].Run.ID)
	_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: runs[1].Run.ID, To: agentfleet.StatusFailed, Error: "boom"})
	require.NoError(t, err)
	e.start(runs[2].Run.ID)

	requireError(t, e.do("POST", "/v1/batches/nope/cancel", key, nil), http.StatusNotFound, "not_found")
	c := decode[wire.Batch](t, e.do("POST", "/v1/batches/"+b.ID+"/cancel", key, nil), http.StatusAccepted)
	require.Equal(t, "cancelled", c.Status)
	require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 1, agentfleet.StatusFailed: 1,
		agentfleet.StatusRunning: 1, agentfleet.StatusCancelled: 3}, c.Counts)
	require.True(t, e.getRun(key, runs[2].Run.ID).CancelRequested, "the running run stops at its next turn")
	again := decode[wire.Batch](t, e.do("POST", "/v1/batches/"+b.ID+"/cancel", key, nil), http.StatusAccepted)
	require.Equal(t, c.Counts, again.Counts)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventQueued, agentfleet.EventCancelled, agentfleet.EventDone},
		eventTypes(e.storedEvents(runs[5].Run.ID)))

	r := decode[wire.Batch](t, e.do("POST", "/v1/batches/"+b.ID+"/retry", key, nil), http.StatusAccepted)
	require.Equal(t, 1, r.Total)
	require.Equal(t, b.ID, r.RetryOf)
	res := e.results(key, r.ID, "")
	require.Len(t, res, 1)
	require.Equal(t, "c1", res[0].CustomID, "the failed input, with its custom_id")
	require.Equal(t, 0, res[0].Index)
	require.Equal(t, r.ID, decode[wire.Batch](t, e.do("POST", "/v1/batches/"+b.ID+"/retry", key, nil), http.StatusOK).ID)
	requireError(t, e.do("POST", "/v1/batches/"+r.ID+"/retry", key, nil), http.StatusConflict, "conflict", "no failed inputs")
}

// TestBatchResultsWait: ?wait=true writes each line as its run ends, in
// input order, and ends after the last.
func TestBatchResultsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	b := e.submitBatch(key, "", jsonl(3), http.StatusAccepted)
	runs := e.batchRuns(b.ID)
	req, err := http.NewRequestWithContext(e.ctx, "GET", e.srv.URL+"/v1/batches/"+b.ID+"/results?wait=true", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := make(chan wire.BatchResult, 3)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var r wire.BatchResult
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				lines <- r
			}
		}
	}()
	// The second ends first: nothing is written until the first has.
	e.complete(runs[1].Run.ID)
	select {
	case r := <-lines:
		t.Fatalf("line %d written before input 0 ended", r.Index)
	case <-time.After(500 * time.Millisecond):
	}
	e.complete(runs[0].Run.ID)
	require.Equal(t, 0, bustest.Recv(t, lines, "line 0").Index)
	require.Equal(t, 1, bustest.Recv(t, lines, "line 1").Index)
	e.complete(runs[2].Run.ID)
	require.Equal(t, 2, bustest.Recv(t, lines, "line 2").Index)
	_, open := <-lines
	require.False(t, open, "the response ends after the last line")
}

// streamBody is a request body made as it is read: head, then n bytes of
// fill, then tail. pulled counts what the server has read of it.
type streamBody struct {
	head, tail []byte
	fill       byte
	n          int64
	pulled     atomic.Int64
}

func (b *streamBody) Read(p []byte) (int, error) {
	at := b.pulled.Load()
	total := int64(len(b.head)) + b.n + int64(len(b.tail))
	if at >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && at < total {
		switch {
		case at < int64(len(b.head)):
			p[k] = b.head[at]
		case at < int64(len(b.head))+b.n:
			p[k] = b.fill
		default:
			p[k] = b.tail[at-int64(len(b.head))-b.n]
		}
		k, at = k+1, at+1
	}
	b.pulled.Store(at)
	return k, nil
}

// post sends body (an io.Reader) as a batch of the given content type.
func (e *env) postStream(key, contentType string, body io.Reader) reply {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, "POST", e.srv.URL+"/v1/batches", body)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", contentType)
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// TestBatchInputsObeyRunLimits: an input larger than a run's request may
// be (POST /v1/runs' body limit) is refused naming its position and
// field, the body is not read past it, and nothing of the batch is left.
func TestBatchInputsObeyRunLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	before := e.tenantRuns("acme")

	// A JSON batch whose second input carries a 64 MiB context.
	body := &streamBody{head: []byte(`{"inputs":[{"message":"a"},{"message":"b","context":"`), fill: 'x', n: 64 << 20,
		tail: []byte(`"},{"message":"c"}]}`)}
	r := e.postStream(key, "application/json", body)
	requireError(t, r, http.StatusRequestEntityTooLarge, "payload_too_large", "input 2 (inputs[1])", `field "context"`,
		fmt.Sprint(api.MaxBodyBytesDefault))
	require.Less(t, body.pulled.Load(), int64(16<<20), "the server read the body past the input's limit")

	// A JSONL line whose metadata is over the limit, within the old line limit.
	line := `{"message":"b","metadata":{"blob":"` + strings.Repeat("y", 2<<20) + `"}}`
	requireError(t, e.do("POST", "/v1/batches", key, jsonl(1)+line+"\n", "Content-Type", "application/x-ndjson"),
		http.StatusRequestEntityTooLarge, "payload_too_large", "line 2", `field "metadata"`)

	// A message over POST /v1/runs' message limit, in either form.
	long := strings.Repeat("m", 300<<10)
	requireError(t, e.do("POST", "/v1/batches", key, map[string]any{"inputs": []map[string]any{{"message": "a"}, {"message": long}}}),
		http.StatusUnprocessableEntity, "unprocessable", "input 2 (inputs[1]): message is")
	requireError(t, e.do("POST", "/v1/batches", key, `{"message":"`+long+`"}`+"\n", "Content-Type", "application/x-ndjson"),
		http.StatusUnprocessableEntity, "unprocessable", "line 1: message is")

	// A batch field over the limit is refused too.
	meta := &streamBody{head: []byte(`{"metadata":{"k":"`), fill: 'z', n: 8 << 20, tail: []byte(`"},"inputs":[{"message":"a"}]}`)}
	requireError(t, e.postStream(key, "application/json", meta), http.StatusRequestEntityTooLarge, "payload_too_large", `field "metadata"`)

	require.Equal(t, before, e.tenantRuns("acme"), "no run of a refused batch exists")
	require.Empty(t, decode[wire.BatchList](t, e.do("GET", "/v1/batches", key, nil), http.StatusOK).Batches)

	// An input just under the limit is admitted.
	ok := `{"inputs":[{"message":"a","context":"` + strings.Repeat("c", api.MaxBodyBytesDefault-100) + `"}]}`
	require.Equal(t, 1, decode[wire.Batch](t, e.do("POST", "/v1/batches", key, ok), http.StatusAccepted).Total)
}

// TestBatchJSONHeldAChunkAtATime: the server's live heap grows as much
// for a JSON batch of 64 MiB as for one of 8 MiB, give or take a few
// chunks: it holds a chunk of inputs at a time, never the body. Not
// parallel: it measures the process's heap.
func TestBatchJSONHeldAChunkAtATime(t *testing.T) {
	e := newEnv(t)
	key := e.tenant("acme")
	old := debug.SetGCPercent(10)
	defer debug.SetGCPercent(old)
	const size = 200 << 10
	small := e.heapGrowth(key, 40, size)
	large := e.heapGrowth(key, 320, size)
	t.Logf("live heap grew by %d MiB for an 8 MiB batch, %d MiB for a 64 MiB one", small>>20, large>>20)
	require.Less(t, large, small+16<<20, "the server's memory grew with the body")
}

// heapGrowth submits a JSON batch of n inputs of size bytes each, made
// as it is sent, and returns by how much the live heap grew meanwhile.
func (e *env) heapGrowth(key string, n, size int) int64 {
	e.t.Helper()
	msg := strings.Repeat("q", size)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte(`{"inputs":[`))
		for i := range n {
			if i > 0 {
				_, _ = pw.Write([]byte{','})
			}
			if _, err := fmt.Fprintf(pw, `{"message":"%d %s","custom_id":"c%d"}`, i, msg, i); err != nil {
				return
			}
		}
		_, _ = pw.Write([]byte(`]}`))
		_ = pw.Close()
	}()
	defer pr.Close()

	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := live[0].Value.Uint64()
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	r := e.postStream(key, "application/json", pr)
	close(stop)
	<-sampled
	require.Equal(e.t, n, decode[wire.Batch](e.t, r, http.StatusAccepted).Total)
	return int64(peak.Load()) - int64(base)
}
