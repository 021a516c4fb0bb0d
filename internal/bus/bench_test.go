package bus_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

func benchBus(b *testing.B) *bus.Bus {
	b.Helper()
	e := bustest.StartServer(b)
	return bustest.Connect(b, e)
}

// BenchmarkTurnRoundTrip is one turn's queue traffic on the embedded
// server, in-process: EnqueueTurn (with ack), Next (one pull), Ack
// (confirmed).
func BenchmarkTurnRoundTrip(b *testing.B) {
	bs := benchBus(b)
	ctx := context.Background()
	src, err := bs.TurnSource(ctx, bus.QueueRunQ, "workers")
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if err := bs.EnqueueTurn(ctx, bus.Turn{Tenant: "acme", RunID: "r" + strconv.Itoa(i), Turn: 1}); err != nil {
			b.Fatal(err)
		}
		d, err := src.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}

// BenchmarkTurnRoundTripParallel runs the same with GOMAXPROCS slots at
// once sharing one connection and one durable, as a worker's slots do.
func BenchmarkTurnRoundTripParallel(b *testing.B) {
	bs := benchBus(b)
	ctx := context.Background()
	src, err := bs.TurnSource(ctx, bus.QueueRunQ, "workers")
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if err := bs.EnqueueTurn(ctx, bus.Turn{Tenant: "acme", RunID: "r" + strconv.FormatInt(i, 10), Turn: 1}); err != nil {
				b.Error(err)
				return
			}
			d, err := src.Next(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := d.Ack(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}

// BenchmarkPublishEvents5 publishes the events of a typical turn: a batch
// of 5, sent together, all acks awaited.
func BenchmarkPublishEvents5(b *testing.B) {
	bs := benchBus(b)
	ctx := context.Background()
	ts := time.Now()
	var seq int64
	evs := make([]agentfleet.Event, 5)
	for b.Loop() {
		for j := range evs {
			seq++
			evs[j] = agentfleet.Event{RunID: "r1", Tenant: "acme", Seq: seq, Turn: 1, Type: agentfleet.EventLog, TS: ts, Content: "hello from the sandbox"}
		}
		if err := bs.PublishEvents(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(5*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkStoredEventHeap measures what the server keeps in memory for
// each event it stores, once the event's message id has left the
// duplicate window (1s here): mostly its index of the stream's subjects,
// which has an entry per run and event type for as long as the stream
// keeps the run's events (EventsMaxAge). Each op publishes the 6 events
// of a run; "own subjects" gives every run its own, as the fleet does,
// "shared subjects" publishes every op on one run's. The figure is the Go
// heap of this process (the embedded server and the client) after a
// collection, per event. Each run waits 150s; give it a fixed count:
//
//	go test -run '^$' -bench StoredEventHeap -benchtime 30000x -timeout 20m ./internal/bus/
func BenchmarkStoredEventHeap(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "own subjects"
		if shared {
			name = "shared subjects"
		}
		b.Run(name, func(b *testing.B) {
			e := bustest.StartServer(b)
			bs := bustest.Connect(b, e, func(c *bus.Config) { c.EventsDedupWindow = time.Second })
			ctx := context.Background()
			types := []agentfleet.EventType{agentfleet.EventQueued, agentfleet.EventStarted, agentfleet.EventUser,
				agentfleet.EventModelCall, agentfleet.EventExecuteJS, agentfleet.EventExecuteJSResult}
			evs := make([]agentfleet.Event, len(types))
			heap := func() uint64 {
				runtime.GC()
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			before := heap()
			ts := time.Now()
			var runs, seq int64
			for b.Loop() {
				runs++
				run := "0194f3b2-7c1e-7a3b-9a4e-" + strconv.FormatInt(100000000000+runs, 10)
				if shared {
					run = "0194f3b2-7c1e-7a3b-9a4e-100000000000"
				}
				for i, typ := range types {
					seq++
					evs[i] = agentfleet.Event{RunID: run, Tenant: "acme", Seq: seq, Turn: 1, Type: typ, TS: ts, Content: "x"}
				}
				if err := bs.PublishEvents(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			// The server forgets message ids a window after they came,
			// and per-block state it has not used for a while: 15s
			// after the last publish the figure was twice what it is
			// at 150s, where it stays.
			time.Sleep(150 * time.Second)
			after := heap()
			b.ReportMetric((float64(after)-float64(before))/float64(seq), "heap-B/event")
		})
	}
}
