package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

type fixedSamples []wire.FleetSample

func (f fixedSamples) FleetSamples() (time.Duration, []wire.FleetSample) { return 10 * time.Second, f }

// TestStats: a tenant's hours (its own only; the admin names any), a
// batch's progress, and the fleet's samples for the admin alone.
func TestStats(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(time.Second)
	e := newEnv(t, func(c *api.Config) {
		c.FleetSamples = fixedSamples{{At: at, Slots: 8, SlotsInUse: 3, QueueDepth: 12}}
	})
	key := e.tenant("acme")
	other := e.tenant("globex")
	_, err := e.store.BudgetSettle(e.ctx, store.BudgetSettleParams{Tenant: "acme", RunID: "r", Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}, Now: time.Now().UTC().Add(-2 * time.Hour)})
	require.NoError(t, err)
	run := e.createRun(key, map[string]any{"message": "hi"})
	_, err = e.store.RunCancel(e.ctx, store.RunCancelParams{ID: run.ID, Reason: "test"})
	require.NoError(t, err)

	ts := decode[wire.TenantStats](t, e.do("GET", "/v1/tenants/acme/stats", key, nil), http.StatusOK)
	require.Equal(t, 7*24, len(ts.Buckets), "a week of hours")
	require.Equal(t, 3600, ts.BucketSeconds)
	require.True(t, ts.Until.After(time.Now()), "the hour now is in is the last")
	var prompt int64
	ended := map[string]int{}
	for _, b := range ts.Buckets {
		prompt += b.PromptTokens
		for s, n := range b.Ended {
			ended[s] += n
		}
	}
	require.Equal(t, int64(100), prompt)
	require.Equal(t, map[string]int{"cancelled": 1}, ended)
	require.Equal(t, int64(100), ts.Buckets[len(ts.Buckets)-3].PromptTokens, "two hours ago")

	admin := decode[wire.TenantStats](t, e.do("GET", "/v1/tenants/acme/stats?hours=3", adminToken, nil), http.StatusOK)
	require.Len(t, admin.Buckets, 3)
	requireError(t, e.do("GET", "/v1/tenants/acme/stats", other, nil), http.StatusNotFound, "not_found")
	requireError(t, e.do("GET", "/v1/tenants/acme/stats?hours=0", key, nil), http.StatusBadRequest, "bad_request", "hours")
	requireError(t, e.do("GET", "/v1/tenants/acme/stats?hours=745", key, nil), http.StatusBadRequest, "bad_request", "hours")

	b := decode[wire.Batch](t, e.do("POST", "/v1/batches", key, map[string]any{"inputs": []map[string]any{{"message": "a"}, {"message": "b"}}}), http.StatusAccepted)
	bs := decode[wire.BatchStats](t, e.do("GET", "/v1/batches/"+b.ID+"/stats", key, nil), http.StatusOK)
	require.Equal(t, 2, bs.Total)
	require.Zero(t, bs.Done)
	require.NotEmpty(t, bs.Buckets)
	require.LessOrEqual(t, len(bs.Buckets), 120)
	require.Equal(t, bs.Until, bs.Since.Add(time.Duration(len(bs.Buckets)*bs.BucketSeconds)*time.Second))
	requireError(t, e.do("GET", "/v1/batches/"+b.ID+"/stats", other, nil), http.StatusNotFound, "not_found")

	fs := decode[wire.FleetStats](t, e.do("GET", "/v1/fleet/stats", adminToken, nil), http.StatusOK)
	require.Equal(t, 10, fs.IntervalSeconds)
	require.Equal(t, []wire.FleetSample{{At: at, Slots: 8, SlotsInUse: 3, QueueDepth: 12}}, fs.Samples)
	requireError(t, e.do("GET", "/v1/fleet/stats", key, nil), http.StatusForbidden, "forbidden")
}

// TestBatchWindow: a batch's life is cut into at most about 120 buckets
// of a round width, from the second it was created, its end included.
func TestBatchWindow(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 3, 1, 12, 0, 0, 400_000_000, time.UTC)
	for _, c := range []struct {
		span  time.Duration
		width time.Duration
		n     int
	}{
		{0, time.Second, 2}, // 12:00:00 to 12:00:01.4
		{59 * time.Second, time.Second, 61},
		{3 * time.Minute, 2 * time.Second, 91},
		{31 * time.Minute, 30 * time.Second, 63},
		{7 * time.Hour, 5 * time.Minute, 85},
		{40 * 24 * time.Hour, 12 * time.Hour, 81},
		{400 * 24 * time.Hour, 24 * time.Hour, 401},
	} {
		w := api.BatchWindow(from, from.Add(c.span))
		require.Equal(t, from.Truncate(time.Second), w.Since, "span %s", c.span)
		require.Equal(t, c.width, w.Bucket, "span %s", c.span)
		require.Equal(t, c.n, w.Buckets(), "span %s", c.span)
		require.False(t, w.Until.Before(from.Add(c.span)), "span %s: the end is in", c.span)
		require.NoError(t, w.Validate())
	}
}
