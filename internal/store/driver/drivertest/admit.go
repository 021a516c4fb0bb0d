package drivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// chunk is inputs from to from+n-1 of batch p as runs created at at, the
// idempotency key of input i keys[i] where given.
func chunk(p store.BatchAdmitParams, from, n int, at time.Time, keys ...string) driver.BatchChunk {
	var c driver.BatchChunk
	for i := from; i < from+n; i++ {
		r := agentfleet.Run{ID: fmt.Sprintf("%s-run-%d", p.ID, i), Tenant: p.Tenant, Agent: agentfleet.DefaultAgent, BatchID: p.ID,
			Status: agentfleet.StatusQueued, Message: fmt.Sprintf("input %d", i), EventSeq: 1, CreatedAt: at, UpdatedAt: at}
		if i-from < len(keys) {
			r.IdempotencyKey = keys[i-from]
			c.Keys = append(c.Keys, r.IdempotencyKey)
		}
		c.Runs = append(c.Runs, store.BatchRun{Index: i, CustomID: fmt.Sprintf("c%d", i), Run: r})
		c.Steps = append(c.Steps, agentfleet.Step{RunID: r.ID, Kind: agentfleet.StepUser, Content: r.Message, CreatedAt: at})
		c.Events = append(c.Events, store.BatchQueuedEvent(r))
	}
	return c
}

// noRefusal is a refuse that refuses nothing and wants no holders.
func noRefusal(t *testing.T) func([]driver.BatchKeyHolder) error {
	return func(h []driver.BatchKeyHolder) error {
		require.Empty(t, h)
		return nil
	}
}

func exerciseAdmit(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("CommitMakesVisible", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		p := store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: agentfleet.DefaultAgent, IdempotencyKey: "nightly", MaxTurns: 3}
		a, err := b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.NoError(t, err)
		require.NoError(t, a.Append(ctx, chunk(p, 0, 2, at, "k0"), func(h []driver.BatchKeyHolder) error {
			require.Empty(t, h, "no run holds k0")
			return nil
		}))
		require.NoError(t, a.Append(ctx, chunk(p, 2, 1, at), noRefusal(t)))

		_, err = b.Driver.BatchGet(ctx, "b1", "")
		require.ErrorIs(t, err, store.ErrNotFound, "invisible until the commit")
		_, err = b.Driver.BatchGetByKey(ctx, "t1", "nightly")
		require.ErrorIs(t, err, store.ErrNotFound)
		listed, err := b.Driver.BatchRunList(ctx, store.BatchRunListParams{ID: "b1", AfterIndex: -1, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, listed)

		c := driver.BatchCommit{BatchCommitParams: store.BatchCommitParams{MaxConcurrent: 2, Metadata: map[string]string{"k": "v"}, CallbackURL: "http://cb"},
			Status: store.BatchRunning, Total: 3, Released: 2}
		got, err := a.Commit(ctx, c)
		require.NoError(t, err)
		require.Equal(t, store.BatchRunning, got.Status)
		require.Equal(t, 3, got.Total)
		require.Equal(t, 2, got.Released)
		require.Equal(t, 2, got.MaxConcurrent)
		require.Equal(t, 3, got.MaxTurns)
		require.Equal(t, map[string]string{"k": "v"}, got.Metadata)
		require.Equal(t, "http://cb", got.CallbackURL)
		require.Equal(t, at, got.CreatedAt)
		require.True(t, got.FinishedAt.IsZero())
		byKey, err := b.Driver.BatchGetByKey(ctx, "t1", "nightly")
		require.NoError(t, err)
		require.Equal(t, got, byKey)
		_, err = b.Driver.BatchGetByKey(ctx, "t2", "nightly")
		require.ErrorIs(t, err, store.ErrNotFound, "of its tenant only")

		listed, err = b.Driver.BatchRunList(ctx, store.BatchRunListParams{ID: "b1", AfterIndex: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, listed, 3)
		for i, br := range listed {
			require.Equal(t, i, br.Index)
			require.Equal(t, fmt.Sprintf("c%d", i), br.CustomID)
			require.Equal(t, agentfleet.StatusQueued, br.Run.Status)
			require.Equal(t, 1, br.Run.AgentVersion, "the agent's version at the begin")
			require.Equal(t, "b1", br.Run.BatchID)
		}
		require.Equal(t, "k0", listed[0].Run.IdempotencyKey)
		evs, err := b.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: "b1-run-1"})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, agentfleet.EventQueued, evs[0].Type)
		steps, err := b.Store.StepListByRun(ctx, store.StepListByRunParams{RunID: "b1-run-1"})
		require.NoError(t, err)
		require.Len(t, steps, 1)
		require.Equal(t, "input 1", steps[0].Content)
	})
	t.Run("EmptyCommit", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		a, err := b.Driver.BatchAdmissionBegin(ctx, store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: agentfleet.DefaultAgent}, at)
		require.NoError(t, err)
		got, err := a.Commit(ctx, driver.BatchCommit{Status: store.BatchCompleted, FinishedAt: at})
		require.NoError(t, err)
		read, err := b.Driver.BatchGet(ctx, "b1", "t1")
		require.NoError(t, err)
		require.Equal(t, got, read)
		require.Equal(t, store.BatchCompleted, read.Status, "stored as given")
		require.Equal(t, at, read.FinishedAt)
		require.Zero(t, read.Total)
	})
	t.Run("RefuseWritesNothing", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		held, err := b.Store.RunCreate(ctx, store.RunCreateParams{Tenant: "t1", Message: "m", IdempotencyKey: "taken"})
		require.NoError(t, err)
		at := now()
		p := store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: agentfleet.DefaultAgent}
		a, err := b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.NoError(t, err)
		require.NoError(t, a.Append(ctx, chunk(p, 0, 1, at, "mine"), noRefusal(t)))
		refusal := errors.New("refused")
		var seen []driver.BatchKeyHolder
		err = a.Append(ctx, chunk(p, 1, 3, at, "free", "taken", "mine"), func(h []driver.BatchKeyHolder) error {
			seen = h
			return refusal
		})
		require.ErrorIs(t, err, refusal, "refuse's error, as it is")
		require.ElementsMatch(t, []driver.BatchKeyHolder{{Key: "taken", RunID: held.Run.ID}, {Key: "mine", RunID: "b1-run-0", BatchID: "b1"}}, seen,
			"the holders, an earlier chunk of the same admission included")
		// The refused chunk wrote nothing: the same inputs go in without
		// their keys.
		require.NoError(t, a.Append(ctx, chunk(p, 1, 3, at), noRefusal(t)))
		got, err := a.Commit(ctx, driver.BatchCommit{Status: store.BatchRunning, Total: 4, Released: 4})
		require.NoError(t, err)
		require.Equal(t, 4, got.Total)
		listed, err := b.Driver.BatchRunList(ctx, store.BatchRunListParams{ID: "b1", AfterIndex: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, listed, 4)
		require.Empty(t, listed[2].Run.IdempotencyKey)
	})
	t.Run("AbortRemoves", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		p := store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: agentfleet.DefaultAgent, IdempotencyKey: "nightly"}
		a, err := b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.NoError(t, err)
		require.NoError(t, a.Append(ctx, chunk(p, 0, 2, at, "k0"), noRefusal(t)))
		require.NoError(t, a.Abort(ctx, 2))

		// The batch id, its key and its runs' are free again.
		again, err := b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.NoError(t, err)
		require.NoError(t, again.Append(ctx, chunk(p, 0, 1, at, "k0"), noRefusal(t)))
		_, err = again.Commit(ctx, driver.BatchCommit{Status: store.BatchRunning, Total: 1, Released: 1})
		require.NoError(t, err)
		listed, err := b.Driver.BatchRunList(ctx, store.BatchRunListParams{ID: "b1", AfterIndex: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, listed, 1)
	})
	t.Run("BeginRefusals", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		_, err := b.Driver.BatchAdmissionBegin(ctx, store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: "nope"}, at)
		require.ErrorIs(t, err, store.ErrUnknownAgent)
		p := store.BatchAdmitParams{ID: "b1", Tenant: "t1", Agent: agentfleet.DefaultAgent}
		a, err := b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.NoError(t, err, "the refused begin left nothing behind")
		_, err = a.Commit(ctx, driver.BatchCommit{Status: store.BatchCompleted, FinishedAt: at})
		require.NoError(t, err)
		_, err = b.Driver.BatchAdmissionBegin(ctx, p, at)
		require.ErrorIs(t, err, store.ErrConflict, "the batch id is taken")
	})
	t.Run("QueueCount", func(t *testing.T) {
		b := open(t)
		_, err := b.Store.TenantCreate(ctx, store.TenantCreateParams{ID: "t1", MaxQueuedRuns: 2})
		require.NoError(t, err)
		limit, n, err := b.Driver.QueueCount(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, 2, limit)
		require.Zero(t, n)
		for range 4 {
			// The gate is the store's: only the count is under test.
			_, _ = b.Store.RunCreate(ctx, store.RunCreateParams{Tenant: "t1", Message: "m"})
		}
		limit, n, err = b.Driver.QueueCount(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, 2, limit)
		require.Equal(t, 2, n, "the two runs the gate admitted")
		_, _, err = b.Driver.QueueCount(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
