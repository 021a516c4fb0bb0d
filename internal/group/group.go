// Package group runs concurrent calls together, for units of work that
// cost about the same for one call as for many (a SQLite write
// transaction, a Postgres pipeline, a worker's batch of turn commits): a
// call that arrives while a group is running waits, and the next group
// carries every call that queued meanwhile. A lone call runs at once: no
// timer, no added latency when idle. Groups run one at a time, each led
// by the caller at the head of the queue. A Queue with a Linger also
// waits a little for company when calls come fast (see Queue.Linger).
//
// A group must never let one call's failure become another's: a run
// function whose group fails as a whole runs its calls again one by one
// (the worker's committer, the Postgres pipeline), or isolates each call
// (SQLite's write batch, one savepoint per call).
package group

import (
	"sync"
	"time"
)

// Queue groups calls of type C. The zero value is ready to use.
type Queue[C any] struct {
	// Linger, when positive, makes a leader whose group holds fewer than
	// LingerGroup calls wait up to Linger for that many, but only while
	// calls arrive more than one per Linger/2 on average: the group is
	// then sure to carry more than it would at once. A lone call still
	// runs at once when calls are far apart, and a group that is large
	// already (callers pile up faster than groups run) goes at once.
	// Set it before the first Do.
	Linger time.Duration

	mu    sync.Mutex
	queue []*waiter[C]
	busy  bool // a caller is leading a group
	// gap is the moving average of the time between calls, last when the
	// latest arrived; kept only with a Linger.
	gap  time.Duration
	last time.Time
	// filled, while a leader lingers, is closed when the queue reaches
	// LingerGroup calls.
	filled chan struct{}
}

// LingerGroup is the group size a lingering leader waits for.
const LingerGroup = 16

type waiter[C any] struct {
	call C
	// signal receives true when the call ran in another caller's group,
	// false when this caller is to lead the next group.
	signal chan bool
}

// Do returns once call has run: in a group another caller led, or in one
// this caller leads. A leader takes up to limit queued calls, its own
// first, and passes them to run, which must run every one of them (and
// record each call's outcome in the call itself); the caller's context is
// the call's business, not the queue's.
func (q *Queue[C]) Do(call C, limit int, run func(calls []C)) {
	w := &waiter[C]{call: call, signal: make(chan bool, 1)}
	q.mu.Lock()
	if q.Linger > 0 {
		now := time.Now()
		if q.last.IsZero() {
			q.gap = q.Linger
		} else {
			q.gap += (now.Sub(q.last) - q.gap) / 8
		}
		q.last = now
	}
	q.queue = append(q.queue, w)
	if q.filled != nil && len(q.queue) >= LingerGroup {
		close(q.filled)
		q.filled = nil
	}
	lead := !q.busy
	q.busy = true
	q.mu.Unlock()
	if !lead && <-w.signal {
		return
	}
	// Leading: w is at the head of the queue (the queue was empty, or
	// the previous leader handed over to its head).
	q.mu.Lock()
	if q.Linger > 0 && q.gap < q.Linger/2 && len(q.queue) < min(limit, LingerGroup) {
		filled := make(chan struct{})
		q.filled = filled
		q.mu.Unlock()
		t := time.NewTimer(q.Linger)
		select {
		case <-filled:
		case <-t.C:
		}
		t.Stop()
		q.mu.Lock()
		if q.filled == filled {
			q.filled = nil
		}
	}
	n := min(len(q.queue), max(limit, 1))
	batch := q.queue[:n:n]
	q.queue = q.queue[n:]
	q.mu.Unlock()
	calls := make([]C, n)
	for i, b := range batch {
		calls[i] = b.call
	}
	run(calls)
	for _, b := range batch {
		if b != w {
			b.signal <- true
		}
	}
	q.mu.Lock()
	if len(q.queue) > 0 {
		q.queue[0].signal <- false // lead the next group
	} else {
		q.busy = false
	}
	q.mu.Unlock()
}
