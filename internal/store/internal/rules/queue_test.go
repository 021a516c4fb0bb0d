package rules

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
)

// fakeQueue is a tenant's queue as the database would count it.
type fakeQueue struct {
	limit, unfinished int
	counts            int // how often it was counted
}

func (q *fakeQueue) count(_ context.Context, _ string) (int, int, error) {
	q.counts++
	return q.limit, min(q.unfinished, q.limit+1), nil
}

// gateAt is a gate whose clock is *now.
func gateAt(now *time.Time) *QueueGate { return &QueueGate{now: func() time.Time { return *now }} }

// admit admits n runs, all created, and fails t when refused.
func admit(t *testing.T, g *QueueGate, q *fakeQueue, n int) {
	t.Helper()
	done, err := g.Admit(context.Background(), "acme", n, q.count)
	require.NoError(t, err)
	done(n)
	q.unfinished += n
}

func refuse(t *testing.T, g *QueueGate, q *fakeQueue, n int) *store.QueueFullError {
	t.Helper()
	_, err := g.Admit(context.Background(), "acme", n, q.count)
	var full *store.QueueFullError
	require.ErrorAs(t, err, &full)
	return full
}

func TestQueueGateFarFromCap(t *testing.T) {
	now := time.Unix(1000, 0)
	g, q := gateAt(&now), &fakeQueue{limit: 1_000_000, unfinished: 500_000}
	admit(t, g, q, 1)
	require.Equal(t, 1, q.counts, "the first admission counts")
	for range 1000 {
		admit(t, g, q, 1)
	}
	require.Equal(t, 1, q.counts, "far below the cap a count is trusted")
	now = now.Add(QueueTrustFar)
	admit(t, g, q, 1)
	require.Equal(t, 2, q.counts, "an old count is not")
}

func TestQueueGateSmallCapCountsEachTime(t *testing.T) {
	now := time.Unix(1000, 0)
	g, q := gateAt(&now), &fakeQueue{limit: 2}
	admit(t, g, q, 1)
	admit(t, g, q, 1)
	full := refuse(t, g, q, 1)
	require.Equal(t, store.QueueFullError{Tenant: "acme", Unfinished: 2, Limit: 2, Requested: 1, RetryAfter: QueueRetryAfter}, *full)
	require.Equal(t, 3, q.counts, "a cheap count is made for every decision near the cap")
	q.unfinished-- // a run ended
	admit(t, g, q, 1)
	require.Equal(t, 4, q.counts)
}

func TestQueueGateExpensiveCountNearCap(t *testing.T) {
	now := time.Unix(1000, 0)
	g, q := gateAt(&now), &fakeQueue{limit: 100_000, unfinished: 99_998}
	admit(t, g, q, 1)
	admit(t, g, q, 1)
	refuse(t, g, q, 1)
	refuse(t, g, q, 1)
	require.Equal(t, 1, q.counts, "an expensive count decides for a while, refusals too")
	q.unfinished -= 10
	refuse(t, g, q, 1)
	now = now.Add(QueueTrustNear)
	admit(t, g, q, 1)
	require.Equal(t, 2, q.counts, "then it is made again")
}

func TestQueueGateBatchAndOutcomes(t *testing.T) {
	now := time.Unix(1000, 0)
	g, q := gateAt(&now), &fakeQueue{limit: 10}
	admit(t, g, q, 7)
	full := refuse(t, g, q, 4)
	require.Equal(t, 4, full.Requested, "a batch is admitted whole or not at all")
	require.Equal(t, 7, full.Unfinished)
	admit(t, g, q, 3)
	refuse(t, g, q, 1)

	// What was admitted and not created (an idempotent repeat) gives
	// its place back; what is in flight holds it.
	q2 := &fakeQueue{limit: 1_000_000}
	g2 := gateAt(&now)
	done, err := g2.Admit(context.Background(), "acme", 1, q2.count)
	require.NoError(t, err)
	st := g2.state("acme")
	require.Equal(t, 1, st.since)
	require.Equal(t, 1, st.inflight)
	done(0)
	require.Equal(t, 0, st.since)
	require.Equal(t, 0, st.inflight)
}

func TestQueueGateForget(t *testing.T) {
	now := time.Unix(1000, 0)
	g, q := gateAt(&now), &fakeQueue{limit: 1_000_000}
	admit(t, g, q, 1)
	admit(t, g, q, 1)
	require.Equal(t, 1, q.counts)
	q.limit = 1
	g.Forget("acme")
	refuse(t, g, q, 1)
	require.Equal(t, 2, q.counts, "a changed cap is counted against at once")
}
