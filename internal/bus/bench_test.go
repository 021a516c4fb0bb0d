package bus_test

import (
	"context"
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
