package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// itemTurns answers "item K" with K*2 in one turn, after pause; inFlight
// counts the calls under way and peak the most at once.
type itemTurns struct {
	pause          time.Duration
	inFlight, peak atomic.Int64
}

func (m *itemTurns) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	n := m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	for p := m.peak.Load(); n > p && !m.peak.CompareAndSwap(p, n); p = m.peak.Load() {
	}
	time.Sleep(m.pause)
	var k int
	if _, err := fmt.Sscanf(r.FirstUser(), "item %d", &k); err != nil {
		return "", agentfleet.Usage{}, fmt.Errorf("unexpected task %q", r.FirstUser())
	}
	return fmt.Sprintf("Done.\n```javascript\nfunction run() { answer(%d) }\n```", 2*k), agentfleet.Usage{PromptTokens: 20, CompletionTokens: 5}, nil
}

func itemsJSONL(n int) *strings.Reader {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"message":"item %d","custom_id":"row-%d","metadata":{"i":"%d"}}`+"\n", i, i, i)
	}
	return strings.NewReader(b.String())
}

// eachBackend runs test twice in parallel, its fleets (made by open)
// over SQLite and over Postgres.
func eachBackend(t *testing.T, test func(t *testing.T, open func(fleetOptions) *testFleet)) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			test(t, func(o fleetOptions) *testFleet {
				if backend == "postgres" {
					o.store = pgtest.Open(t)
				}
				return setupFleetWith(t, o)
			})
		})
	}
}

// waitBatch polls a batch until it has finished.
func (f *testFleet) waitBatch(id string, timeout time.Duration) wire.Batch {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := f.tenant.GetBatch(f.ctx, id)
		require.NoError(f.t, err)
		if b.Status != "running" {
			return b
		}
		require.True(f.t, time.Now().Before(deadline), "batch %s did not finish in %s: %v", id, timeout, b.Counts)
		time.Sleep(50 * time.Millisecond)
	}
}

// A batch of 1,000 inputs runs to completion and its results stream back
// in input order as the runs end, each with its answer, custom_id and
// metadata; the batch then reports its counts, usage and a done event.
func TestFleetBatchOfAThousand(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(fleetOptions) *testFleet) {
		m := &itemTurns{}
		f := open(fleetOptions{responder: m.respond})
		done := make(chan wire.BatchEvent, 1)
		unsub, err := f.bus.SubscribeBatchEvents(f.ctx, "acme", "", func(ev wire.BatchEvent) {
			if ev.Type == wire.BatchEventDone {
				done <- ev
			}
		})
		require.NoError(t, err)
		defer unsub()
		b, err := f.tenant.SubmitBatch(f.ctx, client.BatchSubmitParams{}, itemsJSONL(1000))
		require.NoError(t, err)
		require.Equal(t, 1000, b.Total)

		ctx, cancel := context.WithTimeout(f.ctx, 90*time.Second)
		defer cancel()
		next := 0
		err = f.tenant.BatchResults(ctx, b.ID, -1, true, func(r wire.BatchResult) error {
			require.Equal(t, next, r.Index, "results in input order")
			require.Equal(t, agentfleet.StatusCompleted, r.Status, r.Error)
			require.JSONEq(t, fmt.Sprint(2*next), string(r.Answer))
			require.Equal(t, fmt.Sprintf("row-%d", next), r.CustomID)
			require.Equal(t, map[string]string{"i": fmt.Sprint(next)}, r.Metadata)
			next++
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 1000, next)

		got := f.waitBatch(b.ID, 10*time.Second)
		require.Equal(t, "completed", got.Status)
		require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 1000}, got.Counts)
		require.Equal(t, agentfleet.Usage{PromptTokens: 20_000, CompletionTokens: 5_000}, *got.Usage)
		ev := recvBatchEvent(t, done)
		require.Equal(t, b.ID, ev.Batch)
		require.Equal(t, 1000, ev.Counts[agentfleet.StatusCompleted])
	})
}

func recvBatchEvent(t *testing.T, ch <-chan wire.BatchEvent) wire.BatchEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no batch done event")
		panic("unreachable")
	}
}

// A malformed line refuses the whole batch, naming the line, and no run
// of it ever exists or reaches a worker.
func TestFleetBatchWithAMalformedLine(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(fleetOptions) *testFleet) {
		m := &itemTurns{}
		f := open(fleetOptions{responder: m.respond})
		var body strings.Builder
		_, _ = itemsJSONL(2999).WriteTo(&body)
		body.WriteString(`{"message": "item 2999", "custom_id": }` + "\n")
		_, err := f.tenant.SubmitBatch(f.ctx, client.BatchSubmitParams{}, strings.NewReader(body.String()))
		var ae *client.Error
		require.True(t, errors.As(err, &ae), "%v", err)
		require.Equal(t, 400, ae.Status)
		require.Contains(t, ae.Message, "line 3000")
		counts, err := f.store.RunCountByStatus(f.ctx, "acme")
		require.NoError(t, err)
		require.Empty(t, counts, "no run of the batch exists")
		list, err := f.tenant.ListBatches(f.ctx, 0, "")
		require.NoError(t, err)
		require.Empty(t, list.Batches)
		require.Zero(t, m.peak.Load(), "no model call was made")
	})
}

// A JSON batch with one input over a run's limits, after several chunks
// of good ones reached the store, is refused naming the input and the
// field, and no run of it ever exists or reaches a worker.
func TestFleetBatchWithAnInputTooLarge(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(fleetOptions) *testFleet) {
		m := &itemTurns{}
		f := open(fleetOptions{responder: m.respond})
		req := wire.BatchCreateRequest{}
		for i := range 2500 {
			req.Inputs = append(req.Inputs, wire.BatchInput{Message: fmt.Sprintf("item %d", i), CustomID: fmt.Sprint(i)})
		}
		big, err := json.Marshal(strings.Repeat("x", 2<<20))
		require.NoError(t, err)
		req.Inputs = append(req.Inputs, wire.BatchInput{Message: "item 2500", Context: big})
		_, err = f.tenant.CreateBatch(f.ctx, req)
		var ae *client.Error
		require.True(t, errors.As(err, &ae), "%v", err)
		require.Equal(t, http.StatusRequestEntityTooLarge, ae.Status, ae.Message)
		require.Contains(t, ae.Message, `input 2501 (inputs[2500]): field "context"`)
		counts, err := f.store.RunCountByStatus(f.ctx, "acme")
		require.NoError(t, err)
		require.Empty(t, counts, "no run of the batch exists")
		list, err := f.tenant.ListBatches(f.ctx, 0, "")
		require.NoError(t, err)
		require.Empty(t, list.Batches)
		require.Zero(t, m.peak.Load(), "no model call was made")
	})
}

// Cancelling a batch mid-way cancels every run not ended; those that ran
// keep their results, and the batch ends cancelled.
func TestFleetBatchCancelMidway(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(fleetOptions) *testFleet) {
		m := &itemTurns{pause: 20 * time.Millisecond}
		f := open(fleetOptions{responder: m.respond})
		b, err := f.tenant.SubmitBatch(f.ctx, client.BatchSubmitParams{MaxConcurrent: 4}, itemsJSONL(300))
		require.NoError(t, err)
		for {
			cur, err := f.tenant.GetBatch(f.ctx, b.ID)
			require.NoError(t, err)
			if cur.Counts[agentfleet.StatusCompleted] >= 10 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c, err := f.tenant.CancelBatch(f.ctx, b.ID)
		require.NoError(t, err)
		require.Equal(t, "cancelled", c.Status)
		again, err := f.tenant.CancelBatch(f.ctx, b.ID)
		require.NoError(t, err, "cancel is idempotent")
		require.Equal(t, "cancelled", again.Status)

		got := f.waitBatch(b.ID, 20*time.Second)
		require.Equal(t, "cancelled", got.Status)
		// A run in the middle of a turn ends at its next boundary, after
		// the batch already says cancelled: wait for every run to end.
		require.Eventually(t, func() bool {
			got, err = f.tenant.GetBatch(f.ctx, b.ID)
			require.NoError(t, err)
			return got.Counts[agentfleet.StatusCompleted]+got.Counts[agentfleet.StatusCancelled] == 300
		}, 20*time.Second, 20*time.Millisecond, "every run ended")
		completed, cancelled := got.Counts[agentfleet.StatusCompleted], got.Counts[agentfleet.StatusCancelled]
		require.GreaterOrEqual(t, completed, 10)
		require.Greater(t, cancelled, 250, "the rest was cancelled")
		calls := m.peak.Load()
		require.LessOrEqual(t, calls, int64(4))
	})
}

// max_concurrent is honoured: measured from the model's side and from
// the batch's counts, never more of its runs in flight at once, and the
// cap is reached.
func TestFleetBatchMaxConcurrent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open func(fleetOptions) *testFleet) {
		m := &itemTurns{pause: 30 * time.Millisecond}
		f := open(fleetOptions{responder: m.respond})
		b, err := f.tenant.SubmitBatch(f.ctx, client.BatchSubmitParams{MaxConcurrent: 3}, itemsJSONL(60))
		require.NoError(t, err)
		var mu sync.Mutex
		maxRunning := 0
		for {
			cur, err := f.tenant.GetBatch(f.ctx, b.ID)
			require.NoError(t, err)
			inFlight := 0
			for st, n := range cur.Counts {
				if !st.Terminal() && st != agentfleet.StatusQueued {
					inFlight += n
				}
			}
			mu.Lock()
			maxRunning = max(maxRunning, inFlight)
			mu.Unlock()
			if cur.Status != "running" {
				require.Equal(t, 60, cur.Counts[agentfleet.StatusCompleted])
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		require.LessOrEqual(t, maxRunning, 3, "runs in flight, by the batch's counts")
		require.LessOrEqual(t, m.peak.Load(), int64(3), "model calls at once")
		require.GreaterOrEqual(t, m.peak.Load(), int64(2), "the cap, not a queue of one, set the pace")
	})
}

// A batch with a callback_url: once its runs have all ended, its done
// event is POSTed signed under the tenant's callback secret, and tried
// again with the same webhook-id while the receiver fails.
func TestFleetBatchCallback(t *testing.T) {
	t.Parallel()
	m := &itemTurns{}
	f := setupFleetWith(t, fleetOptions{responder: m.respond})
	tv, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "cb"})
	require.NoError(t, err)
	c := client.New(f.dispatcher.URL(), tv.APIKey)
	rc := newReceiver(t, http.StatusServiceUnavailable)
	b, err := c.SubmitBatch(f.ctx, client.BatchSubmitParams{CallbackURL: rc.srv.URL + "/batch"}, itemsJSONL(5))
	require.NoError(t, err)
	first := rc.next(t)
	rc.status.Store(http.StatusNoContent)
	second := rc.next(t)
	for _, cb := range []receivedCallback{first, second} {
		require.NoError(t, webhook.Verify(webhook.Standard, []string{tv.CallbackSecret}, cb.header, cb.body, time.Now()))
		require.Equal(t, "batch_"+b.ID+"_done", cb.header.Get(webhook.HeaderStandardID))
		var ev wire.BatchEvent
		require.NoError(t, json.Unmarshal(cb.body, &ev))
		require.Equal(t, wire.BatchEventDone, ev.Type)
		require.Equal(t, b.ID, ev.Batch)
		require.Equal(t, "completed", ev.Status)
		require.Equal(t, 5, ev.Counts[agentfleet.StatusCompleted])
	}
}
