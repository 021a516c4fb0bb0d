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

func exerciseRuns(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("LockUpdateEvents", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		at := now()
		var got driver.RunRow
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			r, err := x.RunLock(ctx, id)
			if err != nil {
				return err
			}
			require.Equal(t, agentfleet.StatusQueued, r.Status)
			r.Status, r.Error, r.Answer, r.UpdatedAt = agentfleet.StatusFailed, "boom", []byte(`"x"`), at
			r.CancelRequested, r.CancelReason = true, "why"
			lastSeq := r.EventSeq
			evs := []agentfleet.Event{{Type: agentfleet.EventStarted, TS: at}, {Type: agentfleet.EventUser, TS: at, Content: "hi"}}
			for i := range evs {
				evs[i].RunID, evs[i].Tenant, evs[i].Seq = id, "t1", lastSeq+int64(i)+1
			}
			r.EventSeq = lastSeq + 2
			if got, err = x.RunUpdate(ctx, r); err != nil {
				return err
			}
			return x.EventInsert(ctx, id, lastSeq, evs)
		}))
		require.Equal(t, agentfleet.StatusFailed, got.Status)
		require.Equal(t, "boom", got.Error)
		require.Equal(t, at, got.UpdatedAt)
		require.True(t, got.CancelRequested)
		require.Equal(t, "why", got.CancelReason)
		evs, err := b.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: id})
		require.NoError(t, err)
		require.Equal(t, got.EventSeq, evs[len(evs)-1].Seq)
		require.Equal(t, "hi", evs[len(evs)-1].Content)

		read, err := b.Driver.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, got, read)
		_, err = b.Driver.RunGet(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		err = b.Driver.Tx(ctx, func(x driver.Executor) error { _, err := x.RunLock(ctx, "nope"); return err })
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("StatusesAndDelete", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		a, c := run(t, b, "t1"), run(t, b, "t1")
		end(t, b, a)
		st, err := b.Driver.RunStatuses(ctx, []string{a, c, "nope"})
		require.NoError(t, err)
		require.ElementsMatch(t, []driver.RunStatus{{ID: a, Status: agentfleet.StatusCancelled}, {ID: c, Status: agentfleet.StatusQueued}}, st)
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error { return x.RunDelete(ctx, a) }))
		_, err = b.Driver.RunGet(ctx, a)
		require.ErrorIs(t, err, store.ErrNotFound)
		evs, err := b.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: a})
		require.NoError(t, err)
		require.Empty(t, evs, "its events go with it")
	})
	t.Run("Startable", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		mk := func() agentfleet.Run {
			res, err := b.Store.RunCreate(ctx, store.RunCreateParams{Tenant: "t1", Message: "hi", SessionID: "s1"})
			require.NoError(t, err)
			return res.Run
		}
		head, next := mk(), mk()
		ok, err := b.Driver.RunStartable(ctx, head)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.Driver.RunStartable(ctx, next)
		require.NoError(t, err)
		require.False(t, ok, "its session's head is unfinished")
	})
	_ = time.Second
}

func exerciseApprovals(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("InsertLockDecideList", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		at := now()
		a := store.Approval{ID: "ap1", Tenant: "t1", RunID: id, Turn: 1,
			ApprovalCall: agentfleet.ApprovalCall{Index: 0, Primitive: "http", Method: "POST", URL: "https://example.com", Digest: "d1"},
			Status:       store.ApprovalPending, Scope: store.ApprovalScopeCall, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error { return x.ApprovalInsert(ctx, a) }))
		got, err := b.Driver.ApprovalGet(ctx, "ap1")
		require.NoError(t, err)
		require.Equal(t, a, got)
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			l, err := x.ApprovalLockAt(ctx, id, 1, 0, "d1")
			if err != nil {
				return err
			}
			require.Equal(t, a, l)
			_, err = x.ApprovalLockAt(ctx, id, 1, 0, "other")
			require.ErrorIs(t, err, store.ErrNotFound)
			return nil
		}))
		n, err := b.Driver.ApprovalCountPending(ctx)
		require.NoError(t, err)
		require.Equal(t, []driver.Count{{Key: "t1", N: 1}}, n)
		due, err := b.Driver.ApprovalListDue(ctx, at, 10)
		require.NoError(t, err)
		require.Empty(t, due)
		due, err = b.Driver.ApprovalListDue(ctx, at.Add(time.Hour), 10)
		require.NoError(t, err)
		require.Equal(t, []driver.ApprovalDue{{ID: "ap1"}}, due)

		a.Status, a.Reason, a.DecidedBy, a.DecidedAt = agentfleet.ApprovalApproved, "ok", "me", at
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error { return x.ApprovalUpdate(ctx, a) }))
		rows, err := b.Driver.ApprovalList(ctx, driver.ApprovalListParams{Tenant: "t1", Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, a, rows[0].Approval)
		rows, err = b.Driver.ApprovalList(ctx, driver.ApprovalListParams{Status: store.ApprovalPending, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, rows)
		end(t, b, id)
	})
}

func exerciseBatches(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Missing", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		_, err := b.Driver.BatchGet(ctx, "nope", "")
		require.ErrorIs(t, err, store.ErrNotFound)
		id := run(t, b, "t1")
		_, err = b.Driver.BatchRunIsHeld(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, "a run of no batch")
		bs, err := b.Driver.BatchListUnfinished(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, bs)
		require.NoError(t, b.Driver.BatchAdmissionDropAbandoned(ctx, now()))
	})
}
