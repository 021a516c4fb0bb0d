package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
)

func consumerInfo(t *testing.T, s bundle, src *bus.TurnSource) (ackPending int, pending uint64, redelivered int) {
	t.Helper()
	stream, durable := src.NamesForTest()
	cons, err := s.js.Consumer(s.ctx, stream, durable)
	require.NoError(t, err)
	info, err := cons.Info(s.ctx)
	require.NoError(t, err)
	return info.NumAckPending, info.NumPending, info.NumRedelivered
}

func enqueue(t *testing.T, s bundle, n int) []bus.Turn {
	t.Helper()
	turns := make([]bus.Turn, n)
	for i := range turns {
		turns[i] = bus.Turn{Tenant: "acme", RunID: fmt.Sprintf("run%d", i), Turn: 1}
		require.NoError(t, s.b.EnqueueTurn(s.ctx, turns[i]))
	}
	return turns
}

func TestNextPullsExactlyOne(t *testing.T) {
	t.Parallel()
	s := setup(t)
	turns := enqueue(t, s, 3)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)

	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, turns[0], d.Turn)
	require.EqualValues(t, 1, d.NumDelivered)
	require.Equal(t, bus.QueueRunQ, d.Queue)
	require.EqualValues(t, 2, d.Pending, "what was left queued when it was sent")

	// One call, one message leased: the other two are still the
	// server's to hand out (nothing buffered in this process).
	ackPending, pending, _ := consumerInfo(t, s, src)
	require.Equal(t, 1, ackPending)
	require.EqualValues(t, 2, pending)

	d2, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, turns[1], d2.Turn)
	require.EqualValues(t, 1, d2.Pending)
	ackPending, pending, _ = consumerInfo(t, s, src)
	require.Equal(t, 2, ackPending)
	require.EqualValues(t, 1, pending)

	require.NoError(t, d.Ack(s.ctx))
	require.NoError(t, d2.Ack(s.ctx))
	bl, err := src.Pending(s.ctx)
	require.NoError(t, err)
	require.Equal(t, bus.Backlog{Undelivered: 1, LastDelivered: 2}, bl, "two delivered, one left")
	// Acked work is gone from the work queue.
	require.EqualValues(t, 1, streamInfo(t, s.js, "AF_RUNQ").State.Msgs)
}

func TestNextReturnsOnContextEnd(t *testing.T) {
	t.Parallel()
	s := setup(t)
	src, err := s.b.TurnSource(s.ctx, bus.QueueWork, "workers")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(s.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A closed Bus ends a waiting Next.
	errc := make(chan error, 1)
	go func() {
		_, err := src.Next(s.ctx)
		errc <- err
	}()
	require.NoError(t, s.b.Close())
	require.ErrorIs(t, <-errc, bus.ErrClosed)
}

func TestFetchBatch(t *testing.T) {
	t.Parallel()
	s := setup(t)
	enqueue(t, s, 5)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "scheduler")
	require.NoError(t, err)

	ds, err := src.Fetch(s.ctx, 3, 2*time.Second)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	ds2, err := src.Fetch(s.ctx, 10, 300*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, ds2, 2)
	ackPending, _, _ := consumerInfo(t, s, src)
	require.Equal(t, 5, ackPending)
	for _, d := range append(ds, ds2...) {
		require.NoError(t, d.Ack(s.ctx))
	}
	ds3, err := src.Fetch(s.ctx, 10, 200*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, ds3)
}

func TestTenantFilter(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "a", RunID: "r1", Turn: 1}))
	require.NoError(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "b", RunID: "r2", Turn: 1}))
	srcB, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "sched-b", bus.FilterTenant("b"))
	require.NoError(t, err)
	d, err := srcB.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, "b", d.Turn.Tenant)
	bl, err := srcB.Pending(s.ctx)
	require.NoError(t, err)
	require.Zero(t, bl.Undelivered)
}

func TestInProgressExtendsAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = 600 * time.Millisecond
	s := setup(t, func(c *bus.Config) { c.AckWait = ackWait; c.PullExpiry = 300 * time.Millisecond })
	turns := enqueue(t, s, 2)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)

	kept, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, turns[0], kept.Turn)
	stop := kept.KeepAlive(s.ctx)
	defer stop()
	dropped, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, turns[1], dropped.Turn)

	// The un-heartbeated one comes back after AckWait; the kept one does
	// not, though it has been held longer.
	again, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, turns[1], again.Turn)
	require.EqualValues(t, 2, again.NumDelivered)
	require.GreaterOrEqual(t, time.Since(kept.Enqueued), ackWait)
	require.NoError(t, again.Ack(s.ctx))

	ctx, cancel := context.WithTimeout(s.ctx, 2*ackWait)
	defer cancel()
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the heartbeated turn was redelivered")
	ackPending, _, redelivered := consumerInfo(t, s, src)
	require.Equal(t, 1, ackPending)
	require.Zero(t, redelivered, "the heartbeated turn was redelivered")

	stop()
	require.NoError(t, kept.Ack(s.ctx))
	require.Error(t, kept.InProgress(), "in progress after ack")
}

func TestNakWithDelayRedelivers(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *bus.Config) { c.MaxDeliver = 2 })
	turns := enqueue(t, s, 1)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)

	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.False(t, d.LastAttempt())
	const delay = 300 * time.Millisecond
	naked := time.Now()
	require.NoError(t, d.NakWithDelay(delay))

	d2, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(naked), delay-50*time.Millisecond)
	require.Equal(t, turns[0], d2.Turn)
	require.EqualValues(t, 2, d2.NumDelivered)
	require.True(t, d2.LastAttempt())
	require.False(t, d2.Exhausted())

	require.NoError(t, d2.NakWithDelay(0))
	d3, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, d3.NumDelivered)
	require.True(t, d3.Exhausted())
	require.NoError(t, d3.Term("gave up"))
	// Term is not confirmed by the server: the work queue drops the
	// message shortly after.
	require.Eventually(t, func() bool { return streamInfo(t, s.js, "AF_RUNQ").State.Msgs == 0 },
		5*time.Second, 5*time.Millisecond)
}

// A turn handed back for the worker's own exhaustion comes back as a new
// message: the attempts that counted carried over, the hand-back not
// counted, so it never reaches MaxDeliver by being handed back; its
// trace context kept; a second hand-back of the same message stored once.
func TestHandBackDoesNotCountTowardMaxDeliver(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *bus.Config) { c.MaxDeliver = 2 })
	turn := bus.Turn{Tenant: "acme", RunID: "run0", Turn: 1, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	require.NoError(t, s.b.EnqueueTurn(s.ctx, turn))
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)

	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.NoError(t, d.NakWithDelay(0)) // one attempt failed for real
	d, err = src.Next(s.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, d.Attempts())
	require.True(t, d.LastAttempt())
	for range 5 {
		require.NoError(t, d.HandBack(s.ctx))
		d, err = src.Next(s.ctx)
		require.NoError(t, err)
		require.Equal(t, turn, d.Turn)
		require.EqualValues(t, 1, d.NumDelivered)
		require.EqualValues(t, 1, d.PriorAttempts, "the failed attempt still counts")
		require.True(t, d.LastAttempt(), "the hand-backs do not")
		require.False(t, d.Exhausted())
	}
	require.EqualValues(t, 5, d.HandedBack)
	ackPending, pending, _ := consumerInfo(t, s, src)
	require.Equal(t, 1, ackPending)
	require.Zero(t, pending, "each hand-back acked the message it replaced")

	// A real failure after the hand-backs counts on: one more attempt
	// than MaxDeliver.
	require.NoError(t, d.NakWithDelay(0))
	again, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.True(t, again.Exhausted())
	// Handing the same message back twice (its ack lost) stores one copy.
	require.NoError(t, again.HandBack(s.ctx))
	require.Error(t, again.HandBack(s.ctx), "acked already")
	require.Eventually(t, func() bool { return streamInfo(t, s.js, "AF_RUNQ").State.Msgs == 1 },
		5*time.Second, 5*time.Millisecond)
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	s := setup(t)
	turns := enqueue(t, s, 1)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	d, err := src.Next(s.ctx)
	require.NoError(t, err)

	require.NoError(t, d.DeadLetter(s.ctx, "model kept failing:\nHTTP 500"))
	// The original is terminated without a confirmation from the
	// server; the work queue drops it shortly after.
	require.Eventually(t, func() bool { return streamInfo(t, s.js, "AF_RUNQ").State.Msgs == 0 },
		5*time.Second, 5*time.Millisecond, "original still queued")
	require.EqualValues(t, 1, streamInfo(t, s.js, "AF_DLQ").State.Msgs)

	recs, err := s.b.DeadLetters(s.ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, "model kept failing: HTTP 500", r.Reason)
	require.Equal(t, "af.runq.acme.run0", r.Subject)
	require.Equal(t, "AF_RUNQ", r.Stream)
	require.Equal(t, d.StreamSeq, r.StreamSeq)
	require.EqualValues(t, 1, r.Deliveries)
	require.Equal(t, "acme", r.Tenant)
	require.Equal(t, turns[0].RunID, r.RunID)
	require.JSONEq(t, `{"run_id":"run0","tenant":"acme","turn":1,"wake":0}`, string(r.Data))

	more, err := s.b.DeadLetters(s.ctx, r.Seq, 10)
	require.NoError(t, err)
	require.Empty(t, more)

	// The raw message carries the headers too, for `nats sub af.dlq.>`.
	st, err := s.js.Stream(s.ctx, "AF_DLQ")
	require.NoError(t, err)
	raw, err := st.GetMsg(s.ctx, r.Seq)
	require.NoError(t, err)
	require.Equal(t, "1", raw.Header.Get(bus.HeaderDLQDeliveries))
	require.Equal(t, "af.dlq.acme.run0", raw.Subject)
}

func TestMalformedEnvelopeIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// Garbage on the queue, e.g. from an old or foreign publisher.
	_, err := s.js.PublishMsg(s.ctx, &nats.Msg{Subject: s.b.SubjectForTest(bus.QueueRunQ, "acme", "junk"), Data: []byte("{not json")})
	require.NoError(t, err)
	_, err = s.js.PublishMsg(s.ctx, &nats.Msg{Subject: s.b.SubjectForTest(bus.QueueRunQ, "acme", "other"), Data: []byte(`{"run_id":"mismatch","tenant":"acme","turn":1}`)})
	require.NoError(t, err)
	good := enqueue(t, s, 1)[0]

	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, good, d.Turn)

	recs, err := s.b.DeadLetters(s.ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Contains(t, recs[0].Reason, "malformed turn envelope")
	require.Equal(t, "{not json", string(recs[0].Data))
	require.Contains(t, recs[1].Reason, "arrived on subject")
}

func TestSourceRecreatesVanishedConsumerAndStream(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *bus.Config) { c.PullExpiry = 500 * time.Millisecond })
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	stream, durable := src.NamesForTest()

	// Deleted by an operator between pulls.
	require.NoError(t, s.js.DeleteConsumer(s.ctx, stream, durable))
	first := enqueue(t, s, 1)[0]
	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, first, d.Turn)
	require.NoError(t, d.Ack(s.ctx))

	// Deleted, stream and all, while a slot waits.
	waiting := nextAsync(s.ctx, src)
	require.NoError(t, s.js.DeleteStream(s.ctx, stream))
	second := bus.Turn{Tenant: "acme", RunID: "second", Turn: 1}
	require.NoError(t, s.b.EnqueueTurn(s.ctx, second)) // recreates the stream
	r := <-waiting
	require.NoError(t, r.err)
	require.Equal(t, second, r.d.Turn)
	require.NoError(t, r.d.Ack(s.ctx))
}

// Kept deliveries share one heartbeat, and each leaves it on its own:
// the one whose keepalive stopped and the one whose context ended come
// back after AckWait, the one still kept does not.
func TestKeepAliveSharedHeartbeat(t *testing.T) {
	t.Parallel()
	const ackWait = 600 * time.Millisecond
	s := setup(t, func(c *bus.Config) { c.AckWait = ackWait; c.PullExpiry = 300 * time.Millisecond })
	turns := enqueue(t, s, 3)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	var ds []*bus.Delivery
	for range turns {
		d, err := src.Next(s.ctx)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	keep := ds[0].KeepAlive(s.ctx)
	defer keep()
	stopped := ds[1].KeepAlive(s.ctx)
	ended, end := context.WithCancel(s.ctx)
	defer ds[2].KeepAlive(ended)()
	stopped()
	stopped() // idempotent
	end()

	back := map[string]bool{}
	for range 2 {
		d, err := src.Next(s.ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, d.NumDelivered)
		back[d.Turn.RunID] = true
		require.NoError(t, d.Ack(s.ctx))
	}
	require.Equal(t, map[string]bool{ds[1].Turn.RunID: true, ds[2].Turn.RunID: true}, back)

	ctx, cancel := context.WithTimeout(s.ctx, 2*ackWait)
	defer cancel()
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the kept turn was redelivered")
	require.NoError(t, ds[0].Ack(s.ctx))
}

func TestKeepAliveStopsWithTheBus(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *bus.Config) { c.AckWait = 300 * time.Millisecond })
	enqueue(t, s, 1)
	src, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	stop := d.KeepAlive(s.ctx)
	require.NoError(t, s.b.Close()) // waits for the keepalive goroutine
	stop()
	stop() // idempotent
}

func TestResetRedeliversHeldTurnsAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	turns := enqueue(t, s, 2)
	// A scheduler holds turns for an hour; it dies holding both.
	held, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "scheduler", bus.HoldFor(time.Hour), bus.MaxHeld(50_000))
	require.NoError(t, err)
	for range turns {
		_, err := held.Next(s.ctx)
		require.NoError(t, err)
	}
	stream, durable := held.NamesForTest()
	cons, err := s.js.Consumer(s.ctx, stream, durable)
	require.NoError(t, err)
	info, err := cons.Info(s.ctx)
	require.NoError(t, err)
	require.Equal(t, time.Hour, info.Config.AckWait)
	require.Equal(t, 50_000, info.Config.MaxAckPending)

	// Its successor resets the consumer and gets both back now, not
	// in an hour.
	next, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "scheduler", bus.HoldFor(time.Hour), bus.MaxHeld(50_000))
	require.NoError(t, err)
	require.NoError(t, next.Reset(s.ctx))
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	got := map[string]bool{}
	for range turns {
		d, err := next.Next(ctx)
		require.NoError(t, err)
		got[d.Turn.RunID] = true
		require.NoError(t, d.Ack(ctx))
	}
	require.Equal(t, map[string]bool{"run0": true, "run1": true}, got)
}

// ContinueTurn sends the next turn straight to the workers' queue only
// after a turn the scheduler marked Direct, never marks the next turn
// itself, and a repeat after a redelivery is stored once.
func TestContinueTurnSkipsTheSchedulerOnlyAfterADirectTurn(t *testing.T) {
	t.Parallel()
	s := setup(t)
	runq, err := s.b.TurnSource(s.ctx, bus.QueueRunQ, "scheduler")
	require.NoError(t, err)
	work, err := s.b.TurnSource(s.ctx, bus.QueueWork, "workers")
	require.NoError(t, err)

	prev := bus.Turn{Tenant: "acme", RunID: "run1", Turn: 1, Direct: true}
	next := bus.Turn{Tenant: "acme", RunID: "run1", Turn: 2, Direct: true}
	for range 2 { // the second time as after a redelivery of prev
		direct, err := s.b.ContinueTurn(s.ctx, prev, next)
		require.NoError(t, err)
		require.True(t, direct)
	}
	d, err := work.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, bus.Turn{Tenant: "acme", RunID: "run1", Turn: 2}, d.Turn, "not marked Direct itself")
	require.NoError(t, d.Ack(s.ctx))
	more, err := work.Fetch(s.ctx, 10, 200*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, more, "the repeat was deduplicated")
	more, err = runq.Fetch(s.ctx, 10, 200*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, more, "nothing went through the scheduler's queue")

	// The turn after a turn that came through the scheduler unmarked
	// goes back through it.
	direct, err := s.b.ContinueTurn(s.ctx, d.Turn, bus.Turn{Tenant: "acme", RunID: "run1", Turn: 3})
	require.NoError(t, err)
	require.False(t, direct)
	d, err = runq.Next(s.ctx)
	require.NoError(t, err)
	require.Equal(t, bus.Turn{Tenant: "acme", RunID: "run1", Turn: 3}, d.Turn)
}

// TestTurnWaiting: a run's turn message counts as waiting in either queue,
// delivered or not, until it is acked; other runs' messages do not count.
func TestTurnWaiting(t *testing.T) {
	t.Parallel()
	s := setup(t)
	waiting := func(tenant, run string) bool {
		t.Helper()
		ok, err := s.b.TurnWaiting(s.ctx, tenant, run)
		require.NoError(t, err)
		return ok
	}
	require.False(t, waiting("acme", "run1"), "empty queues")

	require.NoError(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "acme", RunID: "run1", Turn: 1}))
	require.NoError(t, s.b.ForwardTurn(s.ctx, bus.Turn{Tenant: "acme", RunID: "run2", Turn: 3}))
	require.True(t, waiting("acme", "run1"), "in AF_RUNQ")
	require.True(t, waiting("acme", "run2"), "in AF_WORK")
	require.False(t, waiting("acme", "run3"), "another run")
	require.False(t, waiting("globex", "run1"), "the same run id in another tenant")

	src, err := s.b.TurnSource(s.ctx, bus.QueueWork, "workers")
	require.NoError(t, err)
	d, err := src.Next(s.ctx)
	require.NoError(t, err)
	require.True(t, waiting("acme", "run2"), "delivered, not acked")
	require.NoError(t, d.Ack(s.ctx))
	require.Eventually(t, func() bool { return !waiting("acme", "run2") }, 5*time.Second, 10*time.Millisecond, "acked: gone from the work queue")
	require.True(t, waiting("acme", "run1"))

	_, err = s.b.TurnWaiting(s.ctx, "acme", "bad.run")
	require.Error(t, err, "a run id that is not one subject token")
}
