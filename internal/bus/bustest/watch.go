package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
)

// WaitFor bounds the helpers' waits for a message; the happy path never
// comes near it.
const WaitFor = 10 * time.Second

// Recv is the next value on ch, failing t after WaitFor; what names it.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(WaitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Events collects the events published on b from now on that match f,
// until the test ends.
func Events(t testing.TB, b *bus.Bus, f bus.EventFilter) <-chan agentfleet.Event {
	t.Helper()
	ch := make(chan agentfleet.Event, 100)
	unsub, err := b.SubscribeEvents(t.Context(), f, func(ev agentfleet.Event) { ch <- ev })
	if err != nil {
		t.Fatalf("subscribe to events: %v", err)
	}
	t.Cleanup(unsub)
	return ch
}

// Turns takes turn messages off a queue, for a test that stands in for
// whatever consumes it (the scheduler, the workers).
type Turns struct {
	b       *bus.Bus
	q       bus.Queue
	durable string
	once    sync.Once
	src     *bus.TurnSource
	err     error
}

// NewTurns reads queue q of b through the durable consumer durable.
func NewTurns(b *bus.Bus, q bus.Queue, durable string) *Turns {
	return &Turns{b: b, q: q, durable: durable}
}

// Next waits up to WaitFor for the next turn message, acks it and
// returns its turn.
func (s *Turns) Next(t testing.TB) bus.Turn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), WaitFor)
	defer cancel()
	s.once.Do(func() { s.src, s.err = s.b.TurnSource(ctx, s.q, s.durable) })
	if s.err != nil {
		t.Fatalf("turn source on %s: %v", s.q, s.err)
	}
	d, err := s.src.Next(ctx)
	if err != nil {
		t.Fatalf("no turn message on %s: %v", s.q, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack turn %s: %v", d.Turn.MsgID(), err)
	}
	return d.Turn
}

// Depth is the number of messages in queue q of b not yet acked.
func Depth(t testing.TB, b *bus.Bus, q bus.Queue) uint64 {
	t.Helper()
	n, err := b.QueueDepth(t.Context(), q)
	if err != nil {
		t.Fatalf("depth of %s: %v", q, err)
	}
	return n
}
