package worker

import (
	"context"
	"sync"
)

// slotGate holds a worker's slots: up to limit turns at once, limit
// between 1 and max. A turn the worker handed back for want of its own
// resources shrinks limit to three quarters of the turns then running
// (the level the resources did not hold); every turn that succeeds grows
// it by one, back up to max.
type slotGate struct {
	mu    sync.Mutex
	max   int
	limit int
	used  int
	// room is closed, and replaced, when a slot frees or limit grows
	// while a taker waits.
	room    chan struct{}
	waiters int
}

func newSlotGate(max int) *slotGate {
	return &slotGate{max: max, limit: max, room: make(chan struct{})}
}

// take takes a slot, waiting for one until ctx or stop ends (false).
func (g *slotGate) take(ctx context.Context, stop <-chan struct{}) bool {
	for {
		g.mu.Lock()
		if g.used < g.limit {
			g.used++
			g.mu.Unlock()
			return true
		}
		g.waiters++
		room := g.room
		g.mu.Unlock()
		var ok bool
		select {
		case <-room:
			ok = true
		case <-ctx.Done():
		case <-stop:
		}
		g.mu.Lock()
		g.waiters--
		g.mu.Unlock()
		if !ok {
			return false
		}
	}
}

// tryTake takes up to n free slots without waiting and returns how many
// it took.
func (g *slotGate) tryTake(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	took := max(0, min(n, g.limit-g.used))
	g.used += took
	return took
}

// release gives back n slots.
func (g *slotGate) release(n int) {
	g.mu.Lock()
	g.used -= n
	g.signal()
	g.mu.Unlock()
}

// shrink lowers the limit after an exhaustion, to three quarters of the
// slots in use (the one that failed included), and returns it.
func (g *slotGate) shrink() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit = max(1, min(g.limit, g.used*3/4))
	return g.limit
}

// grow raises the limit by one after a success, up to max.
func (g *slotGate) grow() {
	g.mu.Lock()
	if g.limit < g.max {
		g.limit++
		g.signal()
	}
	g.mu.Unlock()
}

// current is the limit now: what the worker announces to the scheduler.
func (g *slotGate) current() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// signal wakes the takers; g.mu held.
func (g *slotGate) signal() {
	if g.waiters > 0 {
		close(g.room)
		g.room = make(chan struct{})
	}
}
