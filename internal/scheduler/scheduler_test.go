package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// newTestScheduler is a scheduler on an embedded NATS server and SQLite,
// with a context that ends with the test (or after 30 seconds).
func newTestScheduler(t *testing.T, m *Metrics) (context.Context, *bus.Bus, *Scheduler) {
	t.Helper()
	return newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.Connect(t, bustest.StartServer(t)) }, Config{Metrics: m})
}

// newTestSchedulerOn is newTestScheduler on the bus connect returns, with
// cfg's other fields.
func newTestSchedulerOn(t *testing.T, connect func(*testing.T) *bus.Bus, cfg Config) (context.Context, *bus.Bus, *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b := connect(t)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg.Bus, cfg.Store = b, st
	s, err := New(cfg)
	require.NoError(t, err)
	return ctx, b, s
}

// startScheduling opens the workers' consumer (so the scheduler has a
// queue to fill) and runs s until the test ends.
func startScheduling(t *testing.T, ctx context.Context, b *bus.Bus, s *Scheduler) *bus.TurnSource {
	t.Helper()
	work, err := b.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	return work
}

// enqueueTurns queues turn 2 of n runs of tenant acme, gap apart.
func enqueueTurns(t *testing.T, ctx context.Context, b *bus.Bus, n int, gap time.Duration) {
	t.Helper()
	for i := range n {
		require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{Tenant: "acme", RunID: fmt.Sprintf("run-%d", i), Turn: 2}))
		time.Sleep(gap)
	}
}

// ackTurns pulls n turns from the workers' queue and acks them, as
// workers that ran them would.
func ackTurns(t *testing.T, ctx context.Context, work *bus.TurnSource, n int) {
	t.Helper()
	for range n {
		d, err := work.Next(ctx)
		require.NoError(t, err)
		require.NoError(t, d.Ack(ctx))
	}
}

// A forwarded turn is marked Direct (its successor may skip the
// scheduler) exactly when no other tenant's turn is left waiting: with
// two tenants queued, only the very last turn forwarded is; with one
// tenant, every turn is.
func TestDispatchMarksTurnsDirectOnlyWhenNoOtherTenantWaits(t *testing.T) {
	t.Parallel()
	ctx, b, s := newTestScheduler(t, nil)
	runq, err := b.TurnSource(ctx, bus.QueueRunQ, s.cfg.Durable)
	require.NoError(t, err)
	work, err := b.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
	require.NoError(t, err)

	// forward queues the turns of the tenants given (three runs each,
	// in turn), hands them to the scheduler's state, dispatches them
	// in rounds of the sizes given, and returns what the workers get.
	forward := func(tenants []string, rounds ...int) []bus.Turn {
		t.Helper()
		var want int
		for i := range 3 {
			for _, ten := range tenants {
				require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{Tenant: ten, RunID: fmt.Sprintf("%s-%d", ten, i), Turn: 2}))
				want++
			}
		}
		state := newState()
		for got := 0; got < want; {
			ds, err := runq.Fetch(ctx, want-got, time.Second)
			require.NoError(t, err)
			for _, d := range ds {
				s.take(ctx, state, d)
			}
			got += len(ds)
		}
		for _, n := range rounds {
			require.Equal(t, n, s.dispatch(ctx, state, n))
		}
		require.Zero(t, state.q.Len())
		var out []bus.Turn
		for range want {
			d, err := work.Next(ctx)
			require.NoError(t, err)
			require.NoError(t, d.Ack(ctx))
			out = append(out, d.Turn)
		}
		return out
	}

	got := forward([]string{"a", "b"}, 4, 2)
	for i, turn := range got {
		require.Equal(t, i == len(got)-1, turn.Direct, "turn %d (%s): Direct only once no other tenant waits", i, turn.RunID)
	}
	for i, turn := range forward([]string{"c"}, 2, 1) {
		require.True(t, turn.Direct, "turn %d (%s): one tenant alone", i, turn.RunID)
	}
}

// While the workers' queue is full, turns keep arriving: the scheduler
// looks at the queue's backlog (a JetStream API call each) a few times per
// pollFullMax, not once per arriving turn or every pollFull. Once the
// workers pull again, every held turn is forwarded.
func TestFullWorkQueueIsNotLookedAtPerArrivingTurn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ctx, b, s := newTestScheduler(t, NewMetrics(reg))
	// The workers' consumer exists, but nobody pulls yet: the queue is
	// full once ReadyDepth turns wait in it.
	work := startScheduling(t, ctx, b, s)

	const turns = 100
	start := time.Now()
	enqueueTurns(t, ctx, b, turns, 3*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	elapsed := time.Since(start)
	reads := metricValue(t, reg, "agentfleet_scheduler_backlog_reads_total")
	require.Equal(t, float64(ReadyDepthDefault), metricValue(t, reg, "agentfleet_scheduler_forwarded_turns_total"), "the queue took its cushion")
	// A look per arriving turn would be 100 or more; one every pollFull
	// over this time about 250.
	require.Less(t, reads, float64(elapsed/pollFullMax)+20, "%v of backlog reads in %s", reads, elapsed)
	t.Logf("%v backlog reads in %s with the queue full and %d turns arriving", reads, elapsed.Round(time.Millisecond), turns)

	ackTurns(t, ctx, work, turns)
}

// The workers' queue takes a turn per idle slot the workers announced,
// plus the cushion: one worker of 10 slots that parks a single pull
// request is fed 10 + ReadyDepth turns at once, not 1 + ReadyDepth. Turns
// it holds un-acked use its slots; once it acks them, their slots take
// turns again.
func TestWorkQueueTakesATurnPerAnnouncedIdleSlot(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ctx, b, s := newTestScheduler(t, NewMetrics(reg))
	work := startScheduling(t, ctx, b, s)
	// A worker of 10 slots, announcing until the test ends (the
	// scheduler starts listening when it starts leading).
	const slots = 10
	actx, stopAnnouncing := context.WithCancel(ctx)
	announced := make(chan struct{})
	defer func() {
		stopAnnouncing()
		<-announced
	}()
	go func() {
		defer close(announced)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = b.AnnounceSlots(s.cfg.WorkersDurable, "w1", slots)
			select {
			case <-tick.C:
			case <-actx.Done():
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)

	forwarded := func() float64 { return metricValue(t, reg, "agentfleet_scheduler_forwarded_turns_total") }
	// settled waits until forwarded reaches want and checks it stays there.
	settled := func(want float64, why string) {
		t.Helper()
		require.Eventually(t, func() bool { return forwarded() >= want }, 5*time.Second, 2*time.Millisecond, why)
		time.Sleep(100 * time.Millisecond)
		require.Equal(t, want, forwarded(), why)
	}
	const turns = 40
	enqueueTurns(t, ctx, b, turns, 0)
	settled(slots+ReadyDepthDefault, "every idle slot and the cushion")

	// The worker takes 6 turns and runs them: 4 slots idle, 8 turns
	// left waiting, so the queue takes nothing more.
	var held []*bus.Delivery
	for range 6 {
		d, err := work.Next(ctx)
		require.NoError(t, err)
		held = append(held, d)
	}
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, float64(slots+ReadyDepthDefault), forwarded(), "4 idle slots + 4 cushion - 8 waiting")

	// It finishes them: 10 idle slots and the cushion, 8 waiting.
	for _, d := range held {
		require.NoError(t, d.Ack(ctx))
	}
	settled(slots+ReadyDepthDefault+6, "the slots the acks freed")

	ackTurns(t, ctx, work, turns-len(held))
}

// metricValue sums the samples of the counter or gauge name in reg (0
// when it has none).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

func TestNextPollInterval(t *testing.T) {
	t.Parallel()
	full := bus.Backlog{Undelivered: ReadyDepthDefault}
	starved := bus.Backlog{Waiting: 3}
	part := bus.Backlog{Undelivered: 1}
	require.Equal(t, 2*pollFull, nextPollInterval(pollFull, full, 0), "still full: too early")
	require.Equal(t, pollFullMax, nextPollInterval(pollFullMax, full, 0), "capped")
	require.Equal(t, pollFull, nextPollInterval(pollFullMax, starved, 7), "workers waited: too late")
	require.Equal(t, 8*time.Millisecond, nextPollInterval(8*time.Millisecond, part, 3), "about right")
}

// lockedBuffer is a log destination several goroutines may write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// While NATS is away, a scheduler holding turns it has no room for looks
// at the workers' queue less and less often and logs its failures once
// in a while, not on every look; once NATS is back it forwards them.
func TestSchedulerRidesOutANATSOutage(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	e := bustest.StartServer(t)
	ctx, b, s := newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.ConnectURL(t, e.ClientURL()) },
		Config{Metrics: NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	work := startScheduling(t, ctx, b, s)

	// Nobody pulls: the workers' queue takes its cushion, and the
	// scheduler holds the rest.
	const turns = ReadyDepthDefault + 6
	enqueueTurns(t, ctx, b, turns, 0)
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "agentfleet_scheduler_forwarded_turns_total") == ReadyDepthDefault
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)

	e.Shutdown()
	const outage = 2 * time.Second
	time.Sleep(outage)
	failed := logs.count("scheduler: read work queue backlog")
	// One look per pollFullMax would log about 125 lines.
	require.Positive(t, failed, "the outage is logged")
	require.LessOrEqual(t, failed, 2, "failed looks logged: %d lines in %s", failed, outage)

	bustest.StartServerAt(t, e.Listen(), e.StoreDir())
	ackTurns(t, ctx, work, turns)
	require.Equal(t, 1, logs.count("scheduler: work queue backlog read again"))
}

// Of two dispatchers' schedulers contending for the lease, the one that
// leads says so on agentfleet_scheduler_leading, the other does not;
// when the leader stops, the other takes over and its gauge follows.
func TestLeadingGaugeFollowsTheLease(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	gauge := func(i int) float64 { return metricValue(t, regs[i], "agentfleet_scheduler_leading") }
	stops := make([]context.CancelFunc, 2)
	dones := make([]chan error, 2)
	for i := range 2 {
		ctx, b, s := newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.Connect(t, srv) },
			Config{Metrics: NewMetrics(regs[i]), LeaseTTL: bus.MinLeaseTTL})
		_, err := b.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
		require.NoError(t, err)
		sctx, stop := context.WithCancel(ctx)
		stops[i], dones[i] = stop, make(chan error, 1)
		go func() { dones[i] <- s.Run(sctx) }()
		t.Cleanup(func() {
			stop()
			<-dones[i]
		})
	}
	require.Eventually(t, func() bool { return gauge(0)+gauge(1) == 1 }, 10*time.Second, 10*time.Millisecond, "one leader")
	leader := 0
	if gauge(1) == 1 {
		leader = 1
	}
	// Hold it: no second leader while the first renews.
	time.Sleep(2 * bus.MinLeaseTTL) // asserting absence of a takeover: nothing to wait on
	require.Equal(t, float64(1), gauge(leader))
	require.Equal(t, float64(0), gauge(1-leader))

	stops[leader]()
	require.NoError(t, <-dones[leader])
	dones[leader] <- nil // for the cleanup
	require.Equal(t, float64(0), gauge(leader), "a stopped scheduler does not lead")
	require.Eventually(t, func() bool { return gauge(1-leader) == 1 }, 10*time.Second, 10*time.Millisecond, "the other takes over")
}
