package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
)

func events(tenant, runID string, from, to int64) []agentfleet.Event {
	var evs []agentfleet.Event
	for seq := from; seq <= to; seq++ {
		evs = append(evs, agentfleet.Event{
			RunID: runID, Tenant: tenant, Seq: seq, Turn: 1,
			Type: agentfleet.EventLog, TS: time.Unix(1700000000, 0).UTC(), Content: "line",
		})
	}
	return evs
}

func nextSeqs(t *testing.T, ctx context.Context, es *bus.EventStream, n int) []int64 {
	t.Helper()
	var seqs []int64
	for range n {
		ev, err := es.Next(ctx)
		require.NoError(t, err)
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

func TestPublishEventsDedupsBySeq(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 3)))
	// A worker re-publishing what a commit owed after a crash.
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 3, 4)))
	info := streamInfo(t, s.js, "AF_EVENTS")
	require.EqualValues(t, 4, info.State.Msgs)

	st, err := s.js.Stream(s.ctx, "AF_EVENTS")
	require.NoError(t, err)
	raw, err := st.GetLastMsgForSubject(s.ctx, "af.events.acme.run1.log")
	require.NoError(t, err)
	require.Contains(t, string(raw.Data), `"v":1`, "schema version filled in")

	bad := events("acme", "run.1", 1, 1)
	require.ErrorIs(t, s.b.PublishEvents(s.ctx, bad), bus.ErrInvalidToken)
	require.Error(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 0, 0)), "seq 0")
}

func TestRunEventsReplaysHistoryThenLive(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 3)))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run2", 1, 2)))  // another run
	require.NoError(t, s.b.PublishEvents(s.ctx, events("other", "run1", 1, 2))) // another tenant

	es, err := s.b.RunEvents(s.ctx, "acme", "run1", 0)
	require.NoError(t, err)
	defer es.Close()
	require.Equal(t, []int64{1, 2, 3}, nextSeqs(t, s.ctx, es, 3))

	// Live: published after the stream caught up.
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 4, 5)))
	require.Equal(t, []int64{4, 5}, nextSeqs(t, s.ctx, es, 2))

	// Nothing else belongs to this run.
	ctx, cancel := context.WithTimeout(s.ctx, 300*time.Millisecond)
	defer cancel()
	_, err = es.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Resuming after seq 3 (an SSE client's Last-Event-ID).
	resumed, err := s.b.RunEvents(s.ctx, "acme", "run1", 3)
	require.NoError(t, err)
	defer resumed.Close()
	ev, err := resumed.Next(s.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, ev.Seq)
	require.Equal(t, "acme", ev.Tenant)
	require.Equal(t, agentfleet.EventLog, ev.Type)
	require.Equal(t, agentfleet.EventVersion, ev.V)

	resumed.Close()
	_, err = resumed.Next(s.ctx)
	require.ErrorIs(t, err, bus.ErrClosed)
}

func TestSubscribeEventsLive(t *testing.T) {
	t.Parallel()
	s := setup(t)
	got := make(chan agentfleet.Event, 10)
	unsubscribe, err := s.b.SubscribeEvents(s.ctx, bus.EventFilter{Tenant: "acme"}, func(ev agentfleet.Event) { got <- ev })
	require.NoError(t, err)

	require.NoError(t, s.b.PublishEvents(s.ctx, events("other", "run1", 1, 1)))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run9", 7, 7)))
	select {
	case ev := <-got:
		require.Equal(t, "acme", ev.Tenant)
		require.EqualValues(t, 7, ev.Seq)
	case <-s.ctx.Done():
		t.Fatal("event not received")
	}
	unsubscribe()
	unsubscribe() // idempotent
	require.Empty(t, got, "the other tenant's event leaked through")
}

func TestPublishEventsRecreatesVanishedStream(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.js.DeleteStream(s.ctx, "AF_EVENTS"))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 5)))
	require.EqualValues(t, 5, streamInfo(t, s.js, "AF_EVENTS").State.Msgs)
}

// SendEvents returns with the acks still to come; Wait collects them,
// also after the stream vanished (it recreates the stream and sends the
// batch again), and a second Wait gives the first outcome.
func TestSendEventsThenWait(t *testing.T) {
	t.Parallel()
	s := setup(t)
	first, err := s.b.SendEvents(events("acme", "run1", 1, 3))
	require.NoError(t, err)
	second, err := s.b.SendEvents(events("acme", "run1", 4, 6))
	require.NoError(t, err)
	require.NoError(t, second.Wait(s.ctx))
	require.NoError(t, first.Wait(s.ctx))
	require.NoError(t, first.Wait(s.ctx))

	es, err := s.b.RunEvents(s.ctx, "acme", "run1", 0)
	require.NoError(t, err)
	defer es.Close()
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, nextSeqs(t, s.ctx, es, 6), "stored in the order sent")

	require.NoError(t, s.js.DeleteStream(s.ctx, "AF_EVENTS"))
	gone, err := s.b.SendEvents(events("acme", "run2", 1, 2))
	require.NoError(t, err)
	require.NoError(t, gone.Wait(s.ctx))
	require.EqualValues(t, 2, streamInfo(t, s.js, "AF_EVENTS").State.Msgs)

	none, err := s.b.SendEvents(nil)
	require.NoError(t, err)
	require.NoError(t, none.Wait(s.ctx), "an empty batch")
	_, err = s.b.SendEvents(events("acme", "run.1", 1, 1))
	require.ErrorIs(t, err, bus.ErrInvalidToken, "checked before anything is sent")
}

// tenantNext reads n events and returns them as "<run>/<seq>" with
// their positions.
func tenantNext(t *testing.T, ctx context.Context, es *bus.TenantEventStream, n int) ([]string, []uint64) {
	t.Helper()
	var ids []string
	var pos []uint64
	for range n {
		ev, err := es.Next(ctx)
		require.NoError(t, err)
		ids = append(ids, ev.Event.RunID+"/"+strconv.FormatInt(ev.Event.Seq, 10))
		pos = append(pos, ev.Pos)
	}
	return ids, pos
}

// TestTenantEventsResumeAfterPosition: a tenant's events of every run, in
// the stream's order, each with its stream position; a reader that
// resumes after a position gets exactly the events after it.
func TestTenantEventsResumeAfterPosition(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 2)))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("other", "run9", 1, 1)))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run2", 1, 2)))

	es, err := s.b.TenantEvents(s.ctx, "acme", 0, false)
	require.NoError(t, err)
	defer es.Close()
	require.Zero(t, es.Start())
	ids, pos := tenantNext(t, s.ctx, es, 4)
	require.Equal(t, []string{"run1/1", "run1/2", "run2/1", "run2/2"}, ids)
	require.Equal(t, []uint64{1, 2, 4, 5}, pos, "stream positions; 3 is the other tenant's")

	// Live, and the other tenant's never.
	require.NoError(t, s.b.PublishEvents(s.ctx, events("other", "run9", 2, 2)))
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 3, 3)))
	ids, pos = tenantNext(t, s.ctx, es, 1)
	require.Equal(t, []string{"run1/3"}, ids)
	require.Equal(t, []uint64{7}, pos)

	resumed, err := s.b.TenantEvents(s.ctx, "acme", 2, false)
	require.NoError(t, err)
	defer resumed.Close()
	ids, _ = tenantNext(t, s.ctx, resumed, 3)
	require.Equal(t, []string{"run2/1", "run2/2", "run1/3"}, ids)

	all, err := s.b.TenantEvents(s.ctx, "", 0, false)
	require.NoError(t, err)
	defer all.Close()
	ids, _ = tenantNext(t, s.ctx, all, 7)
	require.Equal(t, []string{"run1/1", "run1/2", "run9/1", "run2/1", "run2/2", "run9/2", "run1/3"}, ids, "every tenant's")

	_, err = s.b.TenantEvents(s.ctx, "ac.me", 0, false)
	require.ErrorIs(t, err, bus.ErrInvalidToken)
}

// TestTenantEventsFromNow starts after the last event stored when it
// opens, and says where that is, so a reader that reconnects resumes
// from there without losing what came meanwhile.
func TestTenantEventsFromNow(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 3)))
	es, err := s.b.TenantEvents(s.ctx, "acme", 0, true)
	require.NoError(t, err)
	defer es.Close()
	require.EqualValues(t, 3, es.Start())
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 4, 4)))
	ids, pos := tenantNext(t, s.ctx, es, 1)
	require.Equal(t, []string{"run1/4"}, ids)
	require.Equal(t, []uint64{4}, pos)
}

// TestTenantEventsPastTheEnd: a position the stream has not reached (it
// was recreated and counts from 1 again) reads from its start rather
// than waiting for the count to pass it; one aged out skips to the
// oldest kept.
func TestTenantEventsPastTheEnd(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.b.PublishEvents(s.ctx, events("acme", "run1", 1, 4)))
	es, err := s.b.TenantEvents(s.ctx, "acme", 1000, false)
	require.NoError(t, err)
	defer es.Close()
	require.Zero(t, es.Start())
	ids, _ := tenantNext(t, s.ctx, es, 4)
	require.Equal(t, []string{"run1/1", "run1/2", "run1/3", "run1/4"}, ids)

	st, err := s.js.Stream(s.ctx, "AF_EVENTS")
	require.NoError(t, err)
	require.NoError(t, st.Purge(s.ctx, jetstream.WithPurgeSequence(3))) // 1 and 2 aged out
	aged, err := s.b.TenantEvents(s.ctx, "acme", 1, false)
	require.NoError(t, err)
	defer aged.Close()
	ids, pos := tenantNext(t, s.ctx, aged, 2)
	require.Equal(t, []string{"run1/3", "run1/4"}, ids)
	require.Equal(t, []uint64{3, 4}, pos)
}
