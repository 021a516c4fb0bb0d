package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

func exerciseSessions(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	sessionRun := func(t *testing.T, b Backend, tenant, agent, session string) string {
		t.Helper()
		res, err := b.Store.RunCreate(ctx, store.RunCreateParams{Tenant: tenant, Agent: agent, SessionID: session, Message: "m"})
		require.NoError(t, err)
		return res.Run.ID
	}
	// touch sets run id's updated_at to at.
	touch := func(t *testing.T, b Backend, id string, at time.Time) {
		t.Helper()
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			r, err := x.RunLock(ctx, id)
			if err != nil {
				return err
			}
			r.UpdatedAt = at
			_, err = x.RunUpdate(ctx, r)
			return err
		}))
	}
	t.Run("ListGetRuns", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		tenant(t, b, "t2")
		_, err := b.Store.AgentUpsert(ctx, store.AgentUpsertParams{Tenant: "t1", Name: "coder"})
		require.NoError(t, err)
		at := now().Add(time.Hour)
		ra := sessionRun(t, b, "t1", "default", "a")
		rB := sessionRun(t, b, "t1", "default", "B")
		rc1 := sessionRun(t, b, "t1", "default", "c")
		rc2 := sessionRun(t, b, "t1", "coder", "c")
		sessionRun(t, b, "t2", "default", "a")
		run(t, b, "t1") // no session
		touch(t, b, ra, at)
		touch(t, b, rB, at)
		touch(t, b, rc1, at.Add(-time.Minute))
		touch(t, b, rc2, at.Add(-2*time.Minute))

		ids := func(ss []store.Session) []string {
			var out []string
			for _, s := range ss {
				out = append(out, s.ID)
			}
			return out
		}
		start := driver.SessionPos{UpdatedAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		ss, err := b.Driver.SessionList(ctx, "t1", "", start, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "B", "c"}, ids(ss), "newest updated first, a tie by id bytewise descending")
		ss, err = b.Driver.SessionList(ctx, "t1", "", driver.SessionPos{UpdatedAt: at, ID: "a"}, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"B", "c"}, ids(ss))
		ss, err = b.Driver.SessionList(ctx, "t1", "", driver.SessionPos{UpdatedAt: at, ID: "B"}, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, ids(ss))
		ss, err = b.Driver.SessionList(ctx, "t1", "", start, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, ids(ss))
		ss, err = b.Driver.SessionList(ctx, "t1", "coder", start, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, ids(ss), "by the latest run's agent")

		r1, err := b.Driver.RunGet(ctx, rc1)
		require.NoError(t, err)
		c, err := b.Driver.SessionGet(ctx, "t1", "c")
		require.NoError(t, err)
		require.Equal(t, store.Session{ID: "c", Tenant: "t1", Agent: "coder", Runs: 2, LastRunID: rc2, LastStatus: agentfleet.StatusQueued,
			CreatedAt: r1.CreatedAt, UpdatedAt: at.Add(-time.Minute)}, c)
		require.Equal(t, c, ss[0])
		_, err = b.Driver.SessionGet(ctx, "t1", "zz")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.SessionGet(ctx, "t2", "c")
		require.ErrorIs(t, err, store.ErrNotFound)

		rs, err := b.Driver.SessionRuns(ctx, "t1", "c", 10)
		require.NoError(t, err)
		require.Len(t, rs, 2)
		require.Equal(t, []string{rc2, rc1}, []string{rs[0].ID, rs[1].ID}, "newest first")
		rs, err = b.Driver.SessionRuns(ctx, "t1", "c", 1)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, rc2, rs[0].ID)
	})
	t.Run("Checkpoint", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := sessionRun(t, b, "t1", "default", "s")
		cp, err := b.Driver.SessionCheckpoint(ctx, "t1", "s")
		require.NoError(t, err)
		require.Nil(t, cp)
		_, err = b.Store.RunTransition(ctx, store.RunTransitionParams{ID: id, To: agentfleet.StatusRunning})
		require.NoError(t, err)
		_, err = b.Store.TurnCommit(ctx, store.TurnCommitParams{RunID: id, Turn: 1, Status: agentfleet.StatusRunning, Steps: []agentfleet.Step{
			{Kind: agentfleet.StepSummary, Content: "first"}, {Kind: agentfleet.StepModel, Content: "m"}, {Kind: agentfleet.StepSummary, Content: "second"}}})
		require.NoError(t, err)
		_, err = b.Store.TurnCommit(ctx, store.TurnCommitParams{RunID: id, Turn: 2, Status: agentfleet.StatusRunning, Steps: []agentfleet.Step{
			{Kind: agentfleet.StepModel, Content: "later"}}})
		require.NoError(t, err)
		cp, err = b.Driver.SessionCheckpoint(ctx, "t1", "s")
		require.NoError(t, err)
		require.NotNil(t, cp)
		require.Equal(t, agentfleet.Step{RunID: id, Turn: 1, Index: 2, Kind: agentfleet.StepSummary, Content: "second", CreatedAt: cp.CreatedAt}, *cp)
		cp, err = b.Driver.SessionCheckpoint(ctx, "t2", "s")
		require.NoError(t, err)
		require.Nil(t, cp)
	})
	t.Run("LockDelete", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		ended := sessionRun(t, b, "t1", "default", "s")
		open := sessionRun(t, b, "t1", "default", "s")
		end(t, b, ended)
		var st []driver.RunStatus
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			var err error
			st, err = x.SessionLock(ctx, "t1", "s")
			return err
		}))
		require.Equal(t, []driver.RunStatus{{ID: ended, Status: agentfleet.StatusCancelled}, {ID: open, Status: agentfleet.StatusQueued}}, st)

		// A transaction that fails deletes nothing.
		boom := errors.New("boom")
		err := b.Driver.Tx(ctx, func(x driver.Executor) error {
			n, err := x.SessionDeleteEnded(ctx, "t1", "s")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			return boom
		})
		require.ErrorIs(t, err, boom)
		_, err = b.Driver.RunGet(ctx, ended)
		require.NoError(t, err, "rolled back")

		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			n, err := x.SessionDeleteEnded(ctx, "t1", "s")
			require.Equal(t, 1, n, "only the ended run")
			return err
		}))
		_, err = b.Driver.RunGet(ctx, ended)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.RunGet(ctx, open)
		require.NoError(t, err, "the queued run stays")
		steps, err := b.Driver.StepList(ctx, ended, 0, 100)
		require.NoError(t, err)
		require.Empty(t, steps, "its steps went with it")
	})
}
