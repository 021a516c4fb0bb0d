package rules

import (
	"context"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// The queue cap (a tenant's max_queued_runs) is checked on the submission
// path, which runs thousands of times a second, against a number that
// can be a million: counting a tenant's unfinished runs for every
// submission would cost a million-entry index scan each. Keeping a
// counter in the database instead would put a row every submission and
// every run's end must update on the turn commit path, where runs of
// one tenant end in batches from many workers.
//
// So each store counts, and remembers the count for a while: QueueGate
// keeps per tenant the last exact count and the runs this store admitted
// since. Runs that ended since are not subtracted and runs admitted in
// flight are counted, so the estimate (count + admitted since) is never
// below the truth as far as this store's own admissions go. A decision is
// made from the estimate without a query when
//   - the count was made while the caller waited for the tenant's lock
//     (a burst of submissions shares one count), or
//   - the count is recent (QueueTrustFar) and the estimate is far below
//     the cap (by a tenth of it and at least QueueCountCheap), or
//   - the count is recent (QueueTrustNear) and was expensive (more than
//     QueueCountCheap runs), so that a tenant at a cap of a million, and
//     its refused retries, cost one count a second, not one each;
// otherwise it counts again (a count stops at cap+1 runs). Within one
// store the cap is never passed; it may refuse early by the runs still in
// flight at a count (they may be counted twice). Across stores in several
// processes, each may admit past the cap by what the others admitted
// within the trust window, and only in the last two cases above.
//
// Admit takes a number of runs, so a call that admits a batch counts the
// whole batch against the cap at once.

// Queue cap tuning.
const (
	// QueueCountCheap is how many unfinished runs a count may find and
	// still be run again for the next decision near the cap (an index
	// scan of this many entries takes one to two milliseconds:
	// BenchmarkQueueCount in store/postgres).
	QueueCountCheap = 10_000
	// QueueTrustFar is how long a count is trusted for decisions far
	// below the cap.
	QueueTrustFar = 5 * time.Second
	// QueueTrustNear is how long an expensive count is trusted near the
	// cap.
	QueueTrustNear = time.Second
	// QueueRetryAfter is what a refusal asks the client to wait.
	QueueRetryAfter = 5 * time.Second
)

// QueueCount reads a tenant's max_queued_runs and counts its unfinished
// runs, stopping past limit+1 (more cannot change a decision). An unknown
// tenant is store.ErrNotFound.
type QueueCount func(ctx context.Context, tenant string) (limit, unfinished int, err error)

// QueueGate decides admissions against tenants' queue caps for one store.
// The zero value is ready; it is safe for concurrent use.
type QueueGate struct {
	// now is the clock; nil means time.Now (tests set it).
	now func() time.Time

	mu      sync.Mutex
	tenants map[string]*queueState
}

// queueState is what a gate knows of one tenant.
type queueState struct {
	// mu is held across a count, so that concurrent admissions of the
	// tenant wait for it rather than each counting.
	mu         sync.Mutex
	at         time.Time // when the last count ended; zero: never
	limit      int       // max_queued_runs as counted
	unfinished int       // as counted
	// since is what this store admitted after the count (in flight
	// included: it may also be in the count, which errs on refusing);
	// inflight is what it admitted and has not heard the outcome of.
	since, inflight int
}

// Admit reserves n runs of tenant against its cap, counting with count
// when the last count cannot decide (see above). Refused, it returns a
// *store.QueueFullError. Admitted, the caller must call done with how
// many of the n it created (an idempotent repeat creates none), whatever
// happened.
func (g *QueueGate) Admit(ctx context.Context, tenant string, n int, count QueueCount) (done func(created int), err error) {
	st := g.state(tenant)
	arrived := g.clock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.trusted(arrived, g.clock(), n) {
		limit, unfinished, err := count(ctx, tenant)
		if err != nil {
			return nil, err
		}
		// Stamped when it ended, so that callers who waited for it
		// share it.
		st.at, st.limit, st.unfinished, st.since = g.clock(), limit, unfinished, st.inflight
	}
	if est := st.unfinished + st.since; est+n > st.limit {
		return nil, &store.QueueFullError{Tenant: tenant, Unfinished: est, Limit: st.limit, Requested: n, RetryAfter: QueueRetryAfter}
	}
	st.since += n
	st.inflight += n
	return func(created int) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.inflight -= n
		st.since -= n - created
	}, nil
}

// Forget makes the next admission of tenant count: its cap changed. What
// is in flight stays known.
func (g *QueueGate) Forget(tenant string) {
	st := g.state(tenant)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.at = time.Time{}
}

func (g *QueueGate) state(tenant string) *queueState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tenants == nil {
		g.tenants = map[string]*queueState{}
	}
	st := g.tenants[tenant]
	if st == nil {
		st = &queueState{}
		g.tenants[tenant] = st
	}
	return st
}

func (g *QueueGate) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// trusted reports whether the last count may decide, at now, an admission
// of n that arrived (began waiting for st) at arrived, without counting
// again.
func (st *queueState) trusted(arrived, now time.Time, n int) bool {
	if st.at.IsZero() {
		return false
	}
	age := now.Sub(st.at)
	far := st.limit - max(st.limit/10, QueueCountCheap)
	switch {
	case st.at.After(arrived):
		return true
	case age < QueueTrustFar && st.unfinished+st.since+n <= far:
		return true
	case age < QueueTrustNear && st.unfinished > QueueCountCheap:
		return true
	}
	return false
}
