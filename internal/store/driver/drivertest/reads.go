package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// exerciseReads holds the plain reads of runs and what a run holds, and
// EventAppend, to their docs.
func exerciseReads(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("ListsAndCounts", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		first, second := run(t, b, "t1"), run(t, b, "t1")
		end(t, b, first)
		rows, err := b.Driver.RunList(ctx, store.RunListParams{Tenant: "t1", Limit: 10}, 0)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		require.Equal(t, second, rows[0].ID, "newest first")
		rows, err = b.Driver.RunList(ctx, store.RunListParams{Tenant: "t1", Limit: 10}, rows[0].Seq)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, first, rows[0].ID)

		n, err := b.Driver.RunCountActive(ctx, "t1")
		require.NoError(t, err)
		require.Zero(t, n, "queued runs hold no worker")
		cs, err := b.Driver.RunCountByStatus(ctx, "t1")
		require.NoError(t, err)
		require.ElementsMatch(t, []driver.Count{{Key: string(agentfleet.StatusQueued), N: 1}, {Key: string(agentfleet.StatusCancelled), N: 1}}, cs)

		steps, err := b.Driver.StepList(ctx, second, 0, 1)
		require.NoError(t, err)
		require.Len(t, steps, 1, "the message, as a user step at turn 0")
		require.Equal(t, "hi", steps[0].Content)
		_, err = b.Driver.ModelReplyGet(ctx, second, 1)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.JournalGet(ctx, second, 1, 0)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("EventAppend", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		before, err := b.Driver.EventList(ctx, store.EventListByRunParams{RunID: id})
		require.NoError(t, err)
		var last int64
		if len(before) > 0 {
			last = before[len(before)-1].Seq
		}
		at := now()
		evs := []agentfleet.Event{{Type: agentfleet.EventUser, TS: at, Content: "a"}, {Type: agentfleet.EventUser, TS: at, Content: "b"}}
		r, after, err := b.Driver.EventAppend(ctx, id, evs)
		require.NoError(t, err)
		require.Equal(t, last, after, "the seq the events follow")
		require.Equal(t, agentfleet.Run{ID: id, Tenant: "t1"}, r)
		got, err := b.Driver.EventList(ctx, store.EventListByRunParams{RunID: id, AfterSeq: last})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, last+1, got[0].Seq)
		require.Equal(t, "b", got[1].Content)
		got, err = b.Driver.EventList(ctx, store.EventListByRunParams{RunID: id, AfterSeq: last, Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, _, err = b.Driver.EventAppend(ctx, "nope", evs)
		require.ErrorIs(t, err, store.ErrNotFound)
		got, err = b.Driver.EventList(ctx, store.EventListByRunParams{RunID: "nope"})
		require.NoError(t, err)
		require.Empty(t, got)
	})
	t.Run("ChildrenDue", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		ids, err := b.Driver.RunListWaitersDue(ctx, now(), 10)
		require.NoError(t, err)
		require.Empty(t, ids)
		ids, err = b.Driver.RunListOrphaning(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, ids)
		u, err := b.Driver.RunChildrenUsage(ctx, run(t, b, "t1"))
		require.NoError(t, err)
		require.Zero(t, u)
	})
}

func exerciseApprovalNotify(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	b := open(t)
	tenant(t, b, "t1")
	id := run(t, b, "t1")
	at := now()
	a := store.Approval{ID: "ap1", Tenant: "t1", RunID: id, Turn: 1, SessionID: "s1",
		ApprovalCall: agentfleet.ApprovalCall{Index: 2, Primitive: "fetch", Method: "GET", URL: "https://example.com", Digest: "d1"},
		Status:       store.ApprovalPending, Scope: store.ApprovalScopeCall, CreatedAt: at, ExpiresAt: at.Add(time.Hour),
		NotifyURL: "https://example.com/n", NotifyState: store.CallbackPending, NotifyNextAt: at}
	require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error { return x.ApprovalInsert(ctx, a) }))

	got, err := b.Driver.ApprovalGetForCall(ctx, store.ApprovalGetForCallParams{RunID: id, Turn: 1, Tenant: "t1", Call: a.ApprovalCall})
	require.NoError(t, err)
	require.Equal(t, "ap1", got.ID, "the call's own")
	other := a.ApprovalCall
	other.Index, other.Digest, other.Primitive = 3, "d2", "http"
	_, err = b.Driver.ApprovalGetForCall(ctx, store.ApprovalGetForCallParams{RunID: id, Turn: 1, Tenant: "t1", SessionID: "s1", Call: other})
	require.ErrorIs(t, err, store.ErrNotFound, "a pending call-scoped approval grants nothing")

	as, err := b.Driver.ApprovalNotifyClaim(ctx, at, at.Add(time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, at.Add(time.Minute), as[0].NotifyNextAt)
	as, err = b.Driver.ApprovalNotifyClaim(ctx, at, at.Add(time.Minute), 10)
	require.NoError(t, err)
	require.Empty(t, as, "claimed: due later")
	ok, err := b.Driver.ApprovalNotifyUpdate(ctx, store.ApprovalNotifyRecordParams{ID: "ap1", State: store.CallbackDelivered})
	require.NoError(t, err)
	require.True(t, ok)
	got, err = b.Driver.ApprovalGet(ctx, "ap1")
	require.NoError(t, err)
	require.Equal(t, store.CallbackDelivered, got.NotifyState)
	require.Equal(t, 1, got.NotifyAttempts)
	ok, err = b.Driver.ApprovalNotifyUpdate(ctx, store.ApprovalNotifyRecordParams{ID: "nope", State: store.CallbackFailed})
	require.NoError(t, err)
	require.False(t, ok)
	end(t, b, id)
}
