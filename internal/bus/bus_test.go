package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testCtx bounds a test's calls so a hang fails the test instead of the
// whole binary.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type bundle struct {
	e   *bus.Embedded
	b   *bus.Bus
	js  jetstream.JetStream
	ctx context.Context
}

func setup(t *testing.T, mods ...func(*bus.Config)) bundle {
	t.Helper()
	e := bustest.StartServer(t)
	b := bustest.Connect(t, e, mods...)
	return bundle{e: e, b: b, js: b.JetStreamForTest(), ctx: testCtx(t)}
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info
}

func TestConnectEnsuresStreamsIdempotently(t *testing.T) {
	t.Parallel()
	// The first process makes the events stream with a 30-minute
	// duplicate window, as fleets did before EventsDedupWindow.
	thirtyMinutes := func(c *bus.Config) { c.EventsDedupWindow = 30 * time.Minute }
	s := setup(t, thirtyMinutes)
	require.Equal(t, 30*time.Minute, streamInfo(t, s.js, "AF_EVENTS").Config.Duplicates)
	// A second process connecting to the same server finds the streams
	// and leaves them as they are; one with a different EventsMaxAge and
	// the default events window updates that stream in place.
	_ = bustest.Connect(t, s.e, thirtyMinutes)
	b3 := bustest.Connect(t, s.e, func(c *bus.Config) { c.EventsMaxAge = 48 * time.Hour })

	cases := []struct {
		stream    string
		subjects  []string
		retention jetstream.RetentionPolicy
		maxAge    time.Duration
		dup       time.Duration
	}{
		{"AF_RUNQ", []string{"af.runq.>"}, jetstream.WorkQueuePolicy, 0, 30 * time.Minute},
		{"AF_WORK", []string{"af.work.>"}, jetstream.WorkQueuePolicy, 0, 30 * time.Minute},
		{"AF_EVENTS", []string{"af.events.>", "af.batches.>"}, jetstream.LimitsPolicy, 48 * time.Hour, bus.EventsDedupWindowDefault},
		{"AF_DLQ", []string{"af.dlq.>"}, jetstream.LimitsPolicy, bus.DLQMaxAgeDefault, 30 * time.Minute},
	}
	for _, c := range cases {
		info := streamInfo(t, s.js, c.stream)
		require.Equal(t, c.subjects, info.Config.Subjects, c.stream)
		require.Equal(t, c.retention, info.Config.Retention, c.stream)
		require.Equal(t, jetstream.FileStorage, info.Config.Storage, c.stream)
		require.Equal(t, c.maxAge, info.Config.MaxAge, c.stream)
		require.Equal(t, c.dup, info.Config.Duplicates, c.stream)
	}
	require.NoError(t, b3.Ready(s.ctx))
}

// A process connecting to streams already of its shape updates none of
// them (every update takes the stream's locks against the consumers being
// created on it); one whose configuration differs updates the stream it
// changes, once.
func TestConnectUpdatesOnlyAChangedStream(t *testing.T) {
	t.Parallel()
	s := setup(t)
	nc := s.b.ConnForTest()
	updated := make(chan string, 16)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		updated <- m.Subject[len("$JS.EVENT.ADVISORY.STREAM.UPDATED."):]
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())

	_ = bustest.Connect(t, s.e)
	_ = bustest.Connect(t, s.e, func(c *bus.Config) { c.EventsMaxAge = 48 * time.Hour })
	require.Equal(t, "AF_EVENTS", bustest.Recv(t, updated, "the changed stream's update"))
	_ = bustest.Connect(t, s.e, func(c *bus.Config) { c.EventsMaxAge = 48 * time.Hour })
	require.NoError(t, nc.Flush())
	select {
	case name := <-updated:
		t.Fatalf("stream %s updated by a process of its shape", name)
	case <-time.After(200 * time.Millisecond): // asserting absence: nothing to wait on
	}
	require.Equal(t, 48*time.Hour, streamInfo(t, s.js, "AF_EVENTS").Config.MaxAge)
}

// An Observer creates the streams a fleet has not made yet, and leaves
// those it has as it configured them.
func TestObserverLeavesTheFleetsStreamsAlone(t *testing.T) {
	t.Parallel()
	e := bustest.StartServer(t)
	observe := func(c *bus.Config) { c.Observer = true }
	first := bustest.Connect(t, e, observe)
	js := first.JetStreamForTest()
	require.Equal(t, bus.EventsMaxAgeDefault, streamInfo(t, js, "AF_EVENTS").Config.MaxAge, "created with its defaults")

	_ = bustest.Connect(t, e, func(c *bus.Config) { c.EventsMaxAge, c.EventsDedupWindow = 48*time.Hour, time.Minute })
	_ = bustest.Connect(t, e, observe)
	info := streamInfo(t, js, "AF_EVENTS")
	require.Equal(t, 48*time.Hour, info.Config.MaxAge)
	require.Equal(t, time.Minute, info.Config.Duplicates)
	require.NoError(t, first.Ready(context.Background()))
}

func TestTwoFleetsShareAServer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	other := bustest.Connect(t, s.e, func(c *bus.Config) { c.Prefix, c.StreamPrefix = "fleet2", "F2_" })

	require.NoError(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "t", RunID: "r1", Turn: 1}))
	require.NoError(t, other.EnqueueTurn(s.ctx, bus.Turn{Tenant: "t", RunID: "r1", Turn: 1}))
	require.NoError(t, other.EnqueueTurn(s.ctx, bus.Turn{Tenant: "t", RunID: "r2", Turn: 1}))

	require.EqualValues(t, 1, streamInfo(t, s.js, "AF_RUNQ").State.Msgs)
	require.EqualValues(t, 2, streamInfo(t, s.js, "F2_RUNQ").State.Msgs)
	require.Equal(t, []string{"fleet2.runq.>"}, streamInfo(t, s.js, "F2_RUNQ").Config.Subjects)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  bus.Config
		want string
	}{
		{"no url", bus.Config{}, "URL is empty"},
		{"wildcard prefix", bus.Config{URL: "nats://127.0.0.1:1", Prefix: "af.*"}, "Prefix"},
		{"empty prefix token", bus.Config{URL: "nats://127.0.0.1:1", Prefix: "a..b"}, "Prefix"},
		{"stream prefix with dot", bus.Config{URL: "nats://127.0.0.1:1", StreamPrefix: "A.F"}, "StreamPrefix"},
		{"short dedup window", bus.Config{URL: "nats://127.0.0.1:1", DedupWindow: time.Minute}, "DedupWindow"},
		{"tiny events dedup window", bus.Config{URL: "nats://127.0.0.1:1", EventsDedupWindow: time.Millisecond}, "EventsDedupWindow"},
		{"negative max deliver", bus.Config{URL: "nats://127.0.0.1:1", MaxDeliver: -1}, "MaxDeliver"},
		{"tiny ack wait", bus.Config{URL: "nats://127.0.0.1:1", AckWait: time.Millisecond}, "AckWait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := bus.Connect(context.Background(), c.cfg)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestEnqueueTurnDedupsByMsgID(t *testing.T) {
	t.Parallel()
	s := setup(t)
	turn := bus.Turn{Tenant: "acme", RunID: "run1", Turn: 1}
	require.NoError(t, s.b.EnqueueTurn(s.ctx, turn))
	require.NoError(t, s.b.EnqueueTurn(s.ctx, turn)) // a retried publish: accepted, stored once
	require.EqualValues(t, 1, streamInfo(t, s.js, "AF_RUNQ").State.Msgs)

	resumed := turn
	resumed.Wake = 1 // the same turn resumed after parking is a new message
	require.NoError(t, s.b.EnqueueTurn(s.ctx, resumed))
	require.NoError(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "acme", RunID: "run1", Turn: 2}))
	require.EqualValues(t, 3, streamInfo(t, s.js, "AF_RUNQ").State.Msgs)

	// The dispatch queue dedups on its own.
	require.NoError(t, s.b.ForwardTurn(s.ctx, turn))
	require.NoError(t, s.b.ForwardTurn(s.ctx, turn))
	require.EqualValues(t, 1, streamInfo(t, s.js, "AF_WORK").State.Msgs)

	depth, err := s.b.QueueDepth(s.ctx, bus.QueueRunQ)
	require.NoError(t, err)
	require.EqualValues(t, 3, depth)
}

func TestEnqueueTurnRejectsBadTokens(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, turn := range []bus.Turn{
		{Tenant: "ac.me", RunID: "r", Turn: 1},
		{Tenant: "acme", RunID: "r*", Turn: 1},
		{Tenant: "acme", RunID: "r>", Turn: 1},
		{Tenant: "ac me", RunID: "r", Turn: 1},
		{Tenant: "", RunID: "r", Turn: 1},
		{Tenant: "acme", RunID: "r\t", Turn: 1},
	} {
		err := s.b.EnqueueTurn(s.ctx, turn)
		require.ErrorIs(t, err, bus.ErrInvalidToken, "%+v", turn)
	}
	require.Error(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "acme", RunID: "r", Turn: 0}))
}

func TestReady(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.Ready(s.ctx))
	require.NoError(t, s.b.WaitReady(s.ctx))
	require.NoError(t, s.b.Close())
	require.ErrorIs(t, s.b.Ready(s.ctx), bus.ErrClosed)
	require.ErrorIs(t, s.b.EnqueueTurn(s.ctx, bus.Turn{Tenant: "t", RunID: "r", Turn: 1}), bus.ErrClosed)
}

func TestReadyFailsWhileServerIsDown(t *testing.T) {
	t.Parallel()
	e := bustest.StartServer(t)
	b := bustest.ConnectURL(t, e.ClientURL())
	ctx := testCtx(t)
	require.NoError(t, b.Ready(ctx))
	e.Shutdown()
	// The disconnect is noticed asynchronously; a publish fails fast and
	// says so once it has been.
	require.Eventually(t, func() bool { return errors.Is(b.Ready(ctx), bus.ErrNotConnected) }, 10*time.Second, 10*time.Millisecond)
	err := b.EnqueueTurn(ctx, bus.Turn{Tenant: "t", RunID: "r", Turn: 1})
	require.ErrorIs(t, err, bus.ErrNotConnected)
}

func TestControl(t *testing.T) {
	t.Parallel()
	s := setup(t)
	type control struct{ tenant, runID, verb string }
	got := make(chan control, 1)
	unsubscribe, err := s.b.SubscribeControl(func(tenant, runID, verb string) { got <- control{tenant, runID, verb} })
	require.NoError(t, err)
	defer unsubscribe()

	require.NoError(t, s.b.PublishControl(s.ctx, "acme", "run1", bus.VerbCancel))
	select {
	case c := <-got:
		require.Equal(t, control{"acme", "run1", "cancel"}, c)
	case <-s.ctx.Done():
		t.Fatal("control message not received")
	}
	require.ErrorIs(t, s.b.PublishControl(s.ctx, "acme", "run.1", "cancel"), bus.ErrInvalidToken)
	require.ErrorIs(t, s.b.PublishControl(s.ctx, "acme", "run1", "can cel"), bus.ErrInvalidToken)
}
