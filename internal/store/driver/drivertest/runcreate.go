package drivertest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// newRun is a run as the rules hand it to RunInsert, with its events
// numbered from 1.
func newRun(id, tenant string, evs ...agentfleet.Event) (agentfleet.Run, []agentfleet.Event) {
	at := now()
	r := agentfleet.Run{ID: id, Tenant: tenant, Agent: agentfleet.DefaultAgent, Status: agentfleet.StatusQueued,
		Message: "task " + id, EventSeq: int64(len(evs)), CreatedAt: at, UpdatedAt: at}
	for i := range evs {
		evs[i].RunID, evs[i].Tenant, evs[i].Seq, evs[i].V, evs[i].TS = id, tenant, int64(i)+1, agentfleet.EventVersion, at
	}
	return r, evs
}

func exerciseRunCreate(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Insert", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		r, evs := newRun("r1", "t1", agentfleet.Event{Type: agentfleet.EventQueued}, agentfleet.Event{Type: agentfleet.EventLog, Content: "hi"})
		r.Metadata, r.Context, r.MaxTurns, r.MaxTokens = map[string]string{"k": "v"}, []byte(`{"a":1}`), 3, 100
		got, free, inserted, err := b.Driver.RunInsert(ctx, r, evs)
		require.NoError(t, err)
		require.True(t, inserted)
		require.True(t, free, "a run without a session may start")
		require.Equal(t, "r1", got.ID)
		require.Equal(t, agentfleet.StatusQueued, got.Status)
		require.Equal(t, int64(2), got.EventSeq)
		require.Equal(t, r.CreatedAt, got.CreatedAt)
		require.Equal(t, map[string]string{"k": "v"}, got.Metadata)
		require.Positive(t, got.AgentVersion, "the agent's current version")
		read, err := b.Driver.RunGet(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, got, read.Run, "the run as stored")
		steps, err := b.Driver.StepList(ctx, "r1", 0, 1)
		require.NoError(t, err)
		require.Len(t, steps, 1)
		require.Equal(t, agentfleet.StepUser, steps[0].Kind)
		require.Equal(t, "task r1", steps[0].Content)
		stored, err := b.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: "r1"})
		require.NoError(t, err)
		require.Len(t, stored, 2)
		require.Equal(t, int64(2), stored[1].Seq)
		require.Equal(t, "hi", stored[1].Content)
	})
	t.Run("NothingWritten", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		tenant(t, b, "t2")
		r, evs := newRun("r1", "t1", agentfleet.Event{Type: agentfleet.EventQueued})
		r.Agent = "nope"
		_, _, inserted, err := b.Driver.RunInsert(ctx, r, evs)
		require.NoError(t, err)
		require.False(t, inserted, "the tenant has no such agent")
		_, err = b.Driver.RunGet(ctx, "r1")
		require.ErrorIs(t, err, store.ErrNotFound)

		first, _ := newRun("first", "t1")
		first.IdempotencyKey = "k1"
		_, _, inserted, err = b.Driver.RunInsert(ctx, first, nil)
		require.NoError(t, err)
		require.True(t, inserted)
		again, evs := newRun("again", "t1", agentfleet.Event{Type: agentfleet.EventQueued})
		again.IdempotencyKey = "k1"
		_, _, inserted, err = b.Driver.RunInsert(ctx, again, evs)
		require.NoError(t, err)
		require.False(t, inserted, "the key was seen")
		_, err = b.Driver.RunGet(ctx, "again")
		require.ErrorIs(t, err, store.ErrNotFound)
		stored, err := b.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: "again"})
		require.NoError(t, err)
		require.Empty(t, stored)

		other, _ := newRun("other", "t2")
		other.IdempotencyKey = "k1"
		_, _, inserted, err = b.Driver.RunInsert(ctx, other, nil)
		require.NoError(t, err)
		require.True(t, inserted, "keys are per tenant")
	})
	t.Run("ByIdempotency", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		r, _ := newRun("r1", "t1")
		r.IdempotencyKey = "k1"
		got, _, _, err := b.Driver.RunInsert(ctx, r, nil)
		require.NoError(t, err)
		found, err := b.Driver.RunGetByIdempotency(ctx, "t1", "k1")
		require.NoError(t, err)
		require.Equal(t, got, found.Run)
		_, err = b.Driver.RunGetByIdempotency(ctx, "t1", "k2")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.RunGetByIdempotency(ctx, "t2", "k1")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Session", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		insert := func(id, session string) bool {
			r, _ := newRun(id, "t1")
			r.SessionID = session
			_, free, inserted, err := b.Driver.RunInsert(ctx, r, nil)
			require.NoError(t, err)
			require.True(t, inserted)
			return free
		}
		require.True(t, insert("head", "s1"), "the session's first run")
		require.False(t, insert("next", "s1"), "its head is unfinished")
		require.True(t, insert("alone", "s2"), "another session")
		end(t, b, "head")
		require.False(t, insert("last", "s1"), "next is still unfinished")
	})
	t.Run("QueueCount", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		ids := []string{run(t, b, "t1"), run(t, b, "t1"), run(t, b, "t1")}
		end(t, b, ids[0])
		limit, unfinished, err := b.Driver.QueueCount(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, store.MaxQueuedRunsDefault, limit)
		require.Equal(t, 2, unfinished, "an ended run is not counted")
		one := 1
		_, err = b.Store.TenantUpdate(ctx, store.TenantUpdateParams{ID: "t1", MaxQueuedRuns: &one})
		require.NoError(t, err)
		for _, id := range []string{"past1", "past2"} { // past the store's gate
			r, _ := newRun(id, "t1")
			_, _, _, err := b.Driver.RunInsert(ctx, r, nil)
			require.NoError(t, err)
		}
		limit, unfinished, err = b.Driver.QueueCount(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, 1, limit)
		require.Equal(t, 2, unfinished, "of 4, counted no further than one past the cap")
		_, _, err = b.Driver.QueueCount(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
