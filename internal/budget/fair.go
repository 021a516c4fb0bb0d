package budget

import "container/heap"

// FairQueue orders work across tenants by weighted fair share: start-time
// fair queuing on a virtual clock, one unit of cost per turn. A tenant that
// becomes backlogged starts at the current virtual time (it cannot bank
// credit while idle); each turn it is served advances its tag by 1/weight.
// The next turn comes from the tenant with the smallest tag, so a tenant
// with 10,000 queued turns and one with a single turn alternate: the single
// turn waits for at most one turn of the other tenant per unit of weight.
//
// Each tenant has two FIFOs: continuations (turn n+1 of a run in
// progress), which are always eligible, and fresh runs (turn 1), which are
// gated by the caller's admission check (max concurrent runs).
// Continuations go first: finishing started runs frees their slots.
//
// Batch runs are a tenant's lower priority class: their turns (PushBatch)
// wait in two FIFOs of their own, continuations and fresh runs alike, and
// are served only when the tenant has no other turn eligible. So a
// tenant's batch of 100,000 inputs never delays its interactive runs,
// and, being within the tenant's one share, never takes another tenant's.
//
// Cost is O(log T) per push and pop for T backlogged tenants, and memory
// is one entry per queued item plus one per tenant; nothing is per tenant
// per worker. FairQueue is not safe for concurrent use: the scheduler owns
// it from one goroutine.
type FairQueue[T any] struct {
	tenants map[string]*tenantQueue[T]
	ready   tenantHeap[T]
	// blocked holds tenants whose only work is fresh runs the admission
	// check refused; Recheck puts them back.
	blocked map[string]*tenantQueue[T]
	vtime   float64
	seq     uint64
	n       int
}

type tenantQueue[T any] struct {
	id     string
	weight float64
	tag    float64 // virtual start time of the head item
	seq    uint64  // FIFO tie-break among equal tags
	cont   fifo[T]
	fresh  fifo[T]
	// batchCont and batchFresh are the batch class (PushBatch).
	batchCont  fifo[T]
	batchFresh fifo[T]
	index      int // in ready; -1 when not there
}

func (tq *tenantQueue[T]) len() int {
	return tq.cont.len() + tq.fresh.len() + tq.batchCont.len() + tq.batchFresh.len()
}

// NewFairQueue returns an empty queue.
func NewFairQueue[T any]() *FairQueue[T] {
	return &FairQueue[T]{tenants: map[string]*tenantQueue[T]{}, blocked: map[string]*tenantQueue[T]{}}
}

// Len is the number of queued items.
func (q *FairQueue[T]) Len() int { return q.n }

// TenantLen is the number of items a tenant has queued.
func (q *FairQueue[T]) TenantLen(tenant string) int {
	if tq, ok := q.tenants[tenant]; ok {
		return tq.len()
	}
	return 0
}

// TenantInteractiveLen is the number of items a tenant has queued
// outside the batch class.
func (q *FairQueue[T]) TenantInteractiveLen(tenant string) int {
	if tq, ok := q.tenants[tenant]; ok {
		return tq.cont.len() + tq.fresh.len()
	}
	return 0
}

// Push queues an item for tenant with the tenant's current weight (values
// below 1 count as 1). fresh marks the first turn of a run.
func (q *FairQueue[T]) Push(tenant string, weight int, item T, fresh bool) {
	q.push(tenant, weight, item, fresh, false)
}

// PushBatch is Push for an item of the tenant's batch class, served after
// every other item of the tenant.
func (q *FairQueue[T]) PushBatch(tenant string, weight int, item T, fresh bool) {
	q.push(tenant, weight, item, fresh, true)
}

func (q *FairQueue[T]) push(tenant string, weight int, item T, fresh, batch bool) {
	if weight < 1 {
		weight = 1
	}
	tq, ok := q.tenants[tenant]
	if !ok {
		tq = &tenantQueue[T]{id: tenant, index: -1}
		q.tenants[tenant] = tq
	}
	tq.weight = float64(weight)
	wasIdle := tq.len() == 0
	switch {
	case batch && fresh:
		tq.batchFresh.push(item)
	case batch:
		tq.batchCont.push(item)
	case fresh:
		tq.fresh.push(item)
	default:
		tq.cont.push(item)
	}
	q.n++
	if wasIdle {
		// A tenant returning from idle starts now, not where it left
		// off: idle time earns no credit to burst with later.
		tq.tag = max(tq.tag, q.vtime)
		q.seq++
		tq.seq = q.seq
		heap.Push(&q.ready, tq)
		return
	}
	if _, isBlocked := q.blocked[tenant]; isBlocked && !fresh {
		// A continuation is always eligible.
		delete(q.blocked, tenant)
		heap.Push(&q.ready, tq)
	}
}

// Pop returns the next item by fair share. canAdmit is asked before a
// fresh run is handed out; a tenant refused is set aside until Recheck.
// ok is false when nothing is eligible.
func (q *FairQueue[T]) Pop(canAdmit func(tenant string) bool) (item T, tenant string, fresh bool, ok bool) {
	for q.ready.Len() > 0 {
		tq := q.ready[0]
		admitted := -1 // not asked yet
		admit := func() bool {
			if admitted < 0 {
				admitted = 0
				if canAdmit == nil || canAdmit(tq.id) {
					admitted = 1
				}
			}
			return admitted == 1
		}
		switch {
		case tq.cont.len() > 0:
			item = tq.cont.pop()
		case tq.fresh.len() > 0 && admit():
			item, fresh = tq.fresh.pop(), true
		case tq.batchCont.len() > 0:
			item = tq.batchCont.pop()
		case tq.batchFresh.len() > 0 && admit():
			item, fresh = tq.batchFresh.pop(), true
		default:
			heap.Pop(&q.ready)
			q.blocked[tq.id] = tq
			continue
		}
		q.n--
		q.vtime = tq.tag
		tq.tag += 1 / tq.weight
		if tq.len() == 0 {
			heap.Pop(&q.ready)
		} else {
			q.seq++
			tq.seq = q.seq
			heap.Fix(&q.ready, tq.index)
		}
		return item, tq.id, fresh, true
	}
	return item, "", false, false
}

// PopNewest removes and returns the item tenant queued last, the batch
// class first and a fresh run before a continuation (continuations finish
// started runs), without serving the tenant: for a caller that sets
// queued items aside. ok is false when the tenant has nothing queued.
func (q *FairQueue[T]) PopNewest(tenant string) (item T, fresh, ok bool) {
	tq, found := q.tenants[tenant]
	switch {
	case !found:
		return item, false, false
	case tq.batchFresh.len() > 0:
		item, fresh = tq.batchFresh.popLast(), true
	case tq.batchCont.len() > 0:
		item = tq.batchCont.popLast()
	case tq.fresh.len() > 0:
		item, fresh = tq.fresh.popLast(), true
	case tq.cont.len() > 0:
		item = tq.cont.popLast()
	default:
		return item, false, false
	}
	q.n--
	if tq.len() == 0 {
		if tq.index >= 0 {
			heap.Remove(&q.ready, tq.index)
		}
		delete(q.blocked, tenant)
	}
	return item, fresh, true
}

// Largest is the tenant with the most items queued, and how many.
func (q *FairQueue[T]) Largest() (tenant string, n int) {
	for id, tq := range q.tenants {
		if l := tq.len(); l > n {
			tenant, n = id, l
		}
	}
	return tenant, n
}

// Recheck makes set-aside tenants eligible again (their active runs may
// have finished).
func (q *FairQueue[T]) Recheck() {
	for id, tq := range q.blocked {
		delete(q.blocked, id)
		heap.Push(&q.ready, tq)
	}
}

// Forget drops an idle tenant's state (to bound memory over many tenants).
func (q *FairQueue[T]) Forget(tenant string) {
	if tq, ok := q.tenants[tenant]; ok && tq.len() == 0 {
		delete(q.tenants, tenant)
	}
}

type tenantHeap[T any] []*tenantQueue[T]

func (h tenantHeap[T]) Len() int { return len(h) }
func (h tenantHeap[T]) Less(i, j int) bool {
	if h[i].tag != h[j].tag {
		return h[i].tag < h[j].tag
	}
	return h[i].seq < h[j].seq
}
func (h tenantHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *tenantHeap[T]) Push(x any) {
	tq := x.(*tenantQueue[T])
	tq.index = len(*h)
	*h = append(*h, tq)
}
func (h *tenantHeap[T]) Pop() any {
	old := *h
	tq := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	tq.index = -1
	return tq
}

// fifo is a slice-backed queue that reuses its storage.
type fifo[T any] struct {
	items []T
	head  int
}

func (f *fifo[T]) len() int { return len(f.items) - f.head }

func (f *fifo[T]) push(v T) {
	if f.head > 0 && f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	f.items = append(f.items, v)
}

func (f *fifo[T]) popLast() T {
	var zero T
	v := f.items[len(f.items)-1]
	f.items[len(f.items)-1] = zero
	f.items = f.items[:len(f.items)-1]
	return v
}

func (f *fifo[T]) pop() T {
	var zero T
	v := f.items[f.head]
	f.items[f.head] = zero
	f.head++
	if f.head > 1024 && f.head*2 > len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
	return v
}
