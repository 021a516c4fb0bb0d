package budget

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func drain(q *FairQueue[string], n int, canAdmit func(string) bool) []string {
	var out []string
	for range n {
		item, _, _, ok := q.Pop(canAdmit)
		if !ok {
			break
		}
		out = append(out, item)
	}
	return out
}

func TestFairQueueNewTenantIsServedNext(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	for i := range 1000 {
		q.Push("A", 1, fmt.Sprintf("A%d", i), true)
	}
	require.Equal(t, []string{"A0", "A1", "A2"}, drain(q, 3, nil))
	q.Push("B", 1, "B0", true)
	q.Push("B", 1, "B1", true)
	// B arrived behind 997 of A's items but waits at most one of them.
	got := drain(q, 4, nil)
	require.Equal(t, []string{"B0", "A3", "B1", "A4"}, got)
	require.Equal(t, 995, q.Len())
}

func TestFairQueueWeights(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	for range 300 {
		q.Push("heavy", 3, "h", false)
		q.Push("light", 1, "l", false)
	}
	counts := map[string]int{}
	for _, it := range drain(q, 200, nil) {
		counts[it]++
	}
	require.Equal(t, 150, counts["h"])
	require.Equal(t, 50, counts["l"])
}

func TestFairQueueIdleTenantBanksNoCredit(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	for range 100 {
		q.Push("A", 1, "a", false)
	}
	drain(q, 50, nil)
	// B was idle while A was served 50 times; now both have backlog.
	for range 10 {
		q.Push("B", 1, "b", false)
	}
	got := drain(q, 10, nil)
	counts := map[string]int{}
	for _, it := range got {
		counts[it]++
	}
	require.Equal(t, 5, counts["a"], "B must not get a burst for its idle time")
	require.Equal(t, 5, counts["b"])
}

func TestFairQueueAdmissionGatesFreshRunsOnly(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	q.Push("A", 1, "A-fresh1", true)
	q.Push("A", 1, "A-fresh2", true)
	q.Push("B", 1, "B-fresh", true)
	admitA := false
	canAdmit := func(tenant string) bool { return tenant != "A" || admitA }
	require.Equal(t, []string{"B-fresh"}, drain(q, 5, canAdmit))
	_, _, _, ok := q.Pop(canAdmit)
	require.False(t, ok, "A's fresh runs stay gated")
	// A continuation of A is always eligible, and goes before its fresh runs.
	q.Push("A", 1, "A-cont", false)
	require.Equal(t, []string{"A-cont"}, drain(q, 5, canAdmit))
	admitA = true
	_, _, _, ok = q.Pop(canAdmit)
	require.False(t, ok, "a set-aside tenant waits for Recheck")
	q.Recheck()
	require.Equal(t, []string{"A-fresh1", "A-fresh2"}, drain(q, 5, canAdmit))
	require.Zero(t, q.Len())
}

func TestFairQueueManyTenantsRoundRobin(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	const tenants = 1000
	for i := range tenants {
		for range 3 {
			q.Push(fmt.Sprintf("t%04d", i), 1, fmt.Sprintf("t%04d", i), false)
		}
	}
	seen := map[string]int{}
	for _, it := range drain(q, tenants, nil) {
		seen[it]++
	}
	require.Len(t, seen, tenants, "each tenant served once before any is served twice")
}

// PopNewest takes a tenant's last queued item, a fresh run before a
// continuation, without serving the tenant; a tenant emptied so leaves
// the queue.
func TestFairQueuePopNewest(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	q.Push("a", 1, "a-cont", false)
	q.Push("a", 1, "a-fresh-1", true)
	q.Push("a", 1, "a-fresh-2", true)
	q.Push("b", 1, "b-1", true)
	tenant, n := q.Largest()
	require.Equal(t, "a", tenant)
	require.Equal(t, 3, n)
	for _, want := range []struct {
		item  string
		fresh bool
	}{{"a-fresh-2", true}, {"a-fresh-1", true}, {"a-cont", false}} {
		item, fresh, ok := q.PopNewest("a")
		require.True(t, ok)
		require.Equal(t, want.item, item)
		require.Equal(t, want.fresh, fresh)
	}
	_, _, ok := q.PopNewest("a")
	require.False(t, ok)
	require.Equal(t, 1, q.Len())
	item, tenant, _, ok := q.Pop(nil)
	require.True(t, ok)
	require.Equal(t, "b-1", item, "a left the queue")
	require.Equal(t, "b", tenant)
	_, _, _, ok = q.Pop(nil)
	require.False(t, ok)
}

func TestFairQueueBatchClassYieldsWithinTenantOnly(t *testing.T) {
	t.Parallel()
	q := NewFairQueue[string]()
	for i := range 1000 {
		q.PushBatch("A", 1, fmt.Sprintf("batch%d", i), true)
	}
	require.Equal(t, []string{"batch0", "batch1"}, drain(q, 2, nil))
	// A's interactive run, fresh and then continuing, goes before its
	// batch, whatever the batch's backlog.
	q.Push("A", 1, "interactive", true)
	q.PushBatch("A", 1, "batch-cont", false)
	require.Equal(t, []string{"interactive", "batch-cont", "batch2"}, drain(q, 3, nil))
	q.Push("A", 1, "interactive-2", false)
	require.Equal(t, []string{"interactive-2"}, drain(q, 1, nil))
	// Another tenant still gets its share: the batch is within A's.
	q.Push("B", 1, "B0", true)
	q.Push("B", 1, "B1", true)
	require.Equal(t, []string{"B0", "batch3", "B1", "batch4"}, drain(q, 4, nil))
	require.Equal(t, 995, q.TenantLen("A"))
	require.Zero(t, q.TenantInteractiveLen("A"))

	// A tenant at its max concurrent runs still runs batch continuations;
	// spilling takes the batch's newest first.
	admitNone := func(string) bool { return false }
	q.Push("A", 1, "held-back", true)
	q.PushBatch("A", 1, "batch-cont-2", false)
	require.Equal(t, []string{"batch-cont-2"}, drain(q, 1, admitNone))
	require.Empty(t, drain(q, 1, admitNone))
	q.Recheck()
	item, fresh, ok := q.PopNewest("A")
	require.True(t, ok)
	require.True(t, fresh)
	require.Equal(t, "batch999", item)
	require.Equal(t, []string{"held-back"}, drain(q, 1, nil))
}
