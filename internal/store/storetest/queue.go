package storetest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// A tenant's runs not yet finished (queued, running, waiting_*) are
// capped by its max_queued_runs: RunCreate refuses a run beyond it with a
// *store.QueueFullError and writes nothing, except for an idempotent
// repeat, which returns its run as always.

func testQueueCap(t *testing.T, newStore NewStore) {
	refused := func(t *testing.T, b bundle, p store.RunCreateParams) *store.QueueFullError {
		t.Helper()
		_, err := b.s.RunCreate(b.ctx, p)
		var full *store.QueueFullError
		require.ErrorAs(t, err, &full)
		return full
	}
	t.Run("Cap", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{MaxQueuedRuns: 2})
		first := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "one", IdempotencyKey: "first"})
		second := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "two"})

		full := refused(t, b, store.RunCreateParams{Tenant: ten.ID, Message: "three", IdempotencyKey: "third"})
		require.Equal(t, store.QueueFullError{Tenant: ten.ID, Unfinished: 2, Limit: 2, Requested: 1, RetryAfter: full.RetryAfter}, *full)
		require.Positive(t, full.RetryAfter)
		require.Contains(t, full.Error(), "max_queued_runs")
		list, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, list.Runs, 2, "a refused run is not written")

		// The idempotent retry of an admitted run gets it back, cap or
		// no cap.
		again, err := b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, Message: "one", IdempotencyKey: "first"})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Equal(t, first.ID, again.Run.ID)
		require.True(t, again.Startable)

		// Another tenant has its own cap.
		other := b.tenant(t, store.TenantCreateParams{MaxQueuedRuns: 1})
		b.run(t, store.RunCreateParams{Tenant: other.ID})

		// Running and waiting runs count; an ended one does not.
		b.transition(t, first.ID, agentfleet.StatusRunning)
		b.transition(t, second.ID, agentfleet.StatusRunning)
		b.transition(t, second.ID, agentfleet.StatusWaitingBudget)
		refused(t, b, store.RunCreateParams{Tenant: ten.ID})
		_, err = b.s.TurnCommit(b.ctx, store.TurnCommitParams{RunID: first.ID, Turn: 1, Status: agentfleet.StatusCompleted,
			Answer: []byte(`"done"`)})
		require.NoError(t, err)
		third := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "three", IdempotencyKey: "third"})
		refused(t, b, store.RunCreateParams{Tenant: ten.ID})

		// Cancelling frees a place too.
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: third.ID, Reason: "not needed"})
		require.NoError(t, err)
		b.run(t, store.RunCreateParams{Tenant: ten.ID})
		refused(t, b, store.RunCreateParams{Tenant: ten.ID})

		// An unknown tenant is still ErrNotFound.
		_, err = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: "nobody"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("CapChanged", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{MaxQueuedRuns: 1})
		b.run(t, store.RunCreateParams{Tenant: ten.ID})
		refused(t, b, store.RunCreateParams{Tenant: ten.ID})
		_, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, MaxQueuedRuns: ptr(2)})
		require.NoError(t, err)
		b.run(t, store.RunCreateParams{Tenant: ten.ID})
		full := refused(t, b, store.RunCreateParams{Tenant: ten.ID})
		require.Equal(t, 2, full.Limit)
	})
	t.Run("Concurrent", func(t *testing.T) {
		// Submissions racing for the last places never pass the cap,
		// and the cap is reached.
		b := setup(t, newStore)
		const limit = 5
		ten := b.tenant(t, store.TenantCreateParams{MaxQueuedRuns: limit})
		results, errs := atOnce(4*limit, func(i int) (store.RunCreateResult, error) {
			return b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID})
		})
		created := 0
		for i, err := range errs {
			var full *store.QueueFullError
			switch {
			case err == nil:
				require.True(t, results[i].Created)
				created++
			case errors.As(err, &full):
			default:
				require.NoError(t, err)
			}
		}
		require.LessOrEqual(t, created, limit)
		for ; created < limit; created++ {
			b.run(t, store.RunCreateParams{Tenant: ten.ID})
		}
		refused(t, b, store.RunCreateParams{Tenant: ten.ID})
		counts, err := b.s.RunCountByStatus(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, limit, counts[agentfleet.StatusQueued])
	})
}
