package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// admitBatch admits n inputs ("task i", custom id "c<i>") in chunks of
// chunk, and commits.
func (b bundle) admitBatch(t *testing.T, p store.BatchAdmitParams, n, chunk int, maxConcurrent int) store.Batch {
	t.Helper()
	res, err := b.s.BatchAdmit(b.ctx, p)
	require.NoError(t, err)
	require.NotNil(t, res.Admission)
	for from := 0; from < n; from += chunk {
		var in []store.BatchInput
		for i := from; i < min(n, from+chunk); i++ {
			in = append(in, store.BatchInput{Index: i, CustomID: fmt.Sprintf("c%d", i), Message: fmt.Sprintf("task %d", i),
				Metadata: map[string]string{"row": fmt.Sprint(i)}})
		}
		require.NoError(t, res.Admission.Append(b.ctx, in))
	}
	bt, err := res.Admission.Commit(b.ctx, store.BatchCommitParams{MaxConcurrent: maxConcurrent, Metadata: p.Metadata})
	require.NoError(t, err)
	return bt
}

func testBatch(t *testing.T, newStore NewStore) {
	t.Run("AdmitReadResults", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID, Metadata: map[string]string{"source": "csv"}, MaxTurns: 3}, 250, 100, 0)
		require.NotEmpty(t, bt.ID)
		require.Equal(t, store.BatchRunning, bt.Status)
		require.Equal(t, 250, bt.Total)
		require.Equal(t, 250, bt.Released, "no cap: every run released")
		require.Equal(t, agentfleet.DefaultAgent, bt.Agent)

		got, err := b.s.BatchGetByID(b.ctx, store.BatchGetByIDParams{ID: bt.ID, Tenant: ten.ID})
		require.NoError(t, err)
		require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusQueued: 250}, got.Counts)
		require.Equal(t, map[string]string{"source": "csv"}, got.Metadata)
		_, err = b.s.BatchGetByID(b.ctx, store.BatchGetByIDParams{ID: bt.ID, Tenant: other.ID})
		require.ErrorIs(t, err, store.ErrNotFound)

		// Results in input order, paged by index.
		var all []store.BatchRun
		after := -1
		for {
			page, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: bt.ID, AfterIndex: after, Limit: 60})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			after = page[len(page)-1].Index
		}
		require.Len(t, all, 250)
		for i, br := range all {
			require.Equal(t, i, br.Index)
			require.Equal(t, fmt.Sprintf("c%d", i), br.CustomID)
			require.Equal(t, fmt.Sprintf("task %d", i), br.Run.Message)
			require.Equal(t, bt.ID, br.Run.BatchID)
			require.Equal(t, 3, br.Run.MaxTurns)
			require.Equal(t, agentfleet.StatusQueued, br.Run.Status)
		}
		// Each run has its user step and its queued event.
		first := all[7].Run
		require.Len(t, b.steps(t, first.ID), 1)
		evs := b.events(t, first.ID)
		require.Len(t, evs, 1)
		require.Equal(t, agentfleet.EventQueued, evs[0].Type)
		require.Equal(t, int64(1), evs[0].Seq)

		// Counts and usage follow the runs.
		b.transition(t, all[0].Run.ID, agentfleet.StatusRunning)
		_, err = b.s.TurnCommit(b.ctx, commitParams(all[0].Run.ID, 1, agentfleet.StatusCompleted, "a"))
		require.NoError(t, err)
		got, err = b.s.BatchGetByID(b.ctx, store.BatchGetByIDParams{ID: bt.ID})
		require.NoError(t, err)
		require.Equal(t, 1, got.Counts[agentfleet.StatusCompleted])
		require.Equal(t, 249, got.Counts[agentfleet.StatusQueued])
		require.Equal(t, agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, got.Usage)

		failed, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: bt.ID, AfterIndex: -1, Status: []agentfleet.RunStatus{agentfleet.StatusCompleted}})
		require.NoError(t, err)
		require.Len(t, failed, 1)
		require.Equal(t, 0, failed[0].Index)

		// Listed newest first, paged.
		bt2 := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID}, 1, 1, 0)
		list, err := b.s.BatchList(b.ctx, store.BatchListParams{Tenant: ten.ID, Limit: 1})
		require.NoError(t, err)
		require.Len(t, list.Batches, 1)
		require.Equal(t, bt2.ID, list.Batches[0].ID)
		list, err = b.s.BatchList(b.ctx, store.BatchListParams{Tenant: ten.ID, Limit: 1, Cursor: list.NextCursor})
		require.NoError(t, err)
		require.Equal(t, bt.ID, list.Batches[0].ID)
		require.Empty(t, list.NextCursor)
	})

	t.Run("InvisibleUntilCommitAndAbortLeavesNothing", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		res, err := b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID})
		require.NoError(t, err)
		adm := res.Admission
		require.NoError(t, adm.Append(b.ctx, []store.BatchInput{{Index: 0, Message: "a"}, {Index: 1, Message: "b"}}))
		list, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, list.Runs, "an admitting batch's runs are not listed")
		bl, err := b.s.BatchList(b.ctx, store.BatchListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, bl.Batches)

		// A later chunk refused: the caller aborts and nothing is left.
		err = adm.Append(b.ctx, []store.BatchInput{{Index: 2, Message: "c", Metadata: map[string]string{"k": "\x00"}}})
		var ie *store.BatchInputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 2, ie.Index)
		require.ErrorIs(t, err, store.ErrInvalid)
		require.NoError(t, adm.Abort(b.ctx))
		list, err = b.s.RunList(b.ctx, store.RunListParams{Status: []agentfleet.RunStatus{agentfleet.StatusQueued}})
		require.NoError(t, err)
		for _, r := range list.Runs {
			require.NotEqual(t, ten.ID, r.Tenant)
		}
		counts, err := b.s.RunCountByStatus(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Empty(t, counts, "the aborted batch's runs are gone")
		require.NoError(t, adm.Abort(b.ctx), "abort twice is a no-op")

		// Out of order, or too many at once, is invalid.
		res, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.ErrorIs(t, res.Admission.Append(b.ctx, []store.BatchInput{{Index: 1, Message: "x"}}), store.ErrInvalid)
		require.NoError(t, res.Admission.Abort(b.ctx))
		_, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID, MaxConcurrent: -1})
		require.ErrorIs(t, err, store.ErrInvalid)
	})

	t.Run("IdempotencyKeys", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID, IdempotencyKey: "nightly"}, 2, 2, 0)
		res, err := b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID, IdempotencyKey: "nightly"})
		require.NoError(t, err)
		require.Nil(t, res.Admission)
		require.Equal(t, bt.ID, res.Existing.ID)

		run := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "m", IdempotencyKey: "k1"})
		res, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID})
		require.NoError(t, err)
		err = res.Admission.Append(b.ctx, []store.BatchInput{{Index: 0, Message: "a", IdempotencyKey: "fresh"}, {Index: 1, Message: "b", IdempotencyKey: "k1"}})
		var ie *store.BatchInputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 1, ie.Index)
		require.ErrorIs(t, err, store.ErrConflict)
		require.Contains(t, err.Error(), run.ID)
		require.NoError(t, res.Admission.Abort(b.ctx))

		// Repeated within one batch, across chunks or within one.
		res, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.NoError(t, res.Admission.Append(b.ctx, []store.BatchInput{{Index: 0, Message: "a", IdempotencyKey: "x"}}))
		err = res.Admission.Append(b.ctx, []store.BatchInput{{Index: 1, Message: "b", IdempotencyKey: "y"}, {Index: 2, Message: "c", IdempotencyKey: "y"}})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 2, ie.Index)
		err = res.Admission.Append(b.ctx, []store.BatchInput{{Index: 1, Message: "b", IdempotencyKey: "x"}})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 1, ie.Index)
		require.Contains(t, ie.Msg, "input 0")
		require.NoError(t, res.Admission.Abort(b.ctx))
		// The aborted batch's keys are free again.
		b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "m", IdempotencyKey: "x"})
	})

	t.Run("MaxConcurrentRelease", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID}, 5, 5, 2)
		require.Equal(t, 2, bt.Released)
		runs, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: bt.ID, AfterIndex: -1})
		require.NoError(t, err)
		held := func(i int) bool {
			h, err := b.s.BatchRunIsHeld(b.ctx, runs[i].Run.ID)
			require.NoError(t, err)
			return h
		}
		require.False(t, held(1))
		require.True(t, held(2))

		// A run that ends releases the next; RunFamilySettle is safe to repeat.
		b.transition(t, runs[0].Run.ID, agentfleet.StatusRunning)
		b.transition(t, runs[0].Run.ID, agentfleet.StatusCompleted)
		res, err := b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: runs[0].Run.ID})
		require.NoError(t, err)
		require.Len(t, res.Released, 1)
		require.Equal(t, runs[2].Run.ID, res.Released[0].ID)
		again, err := b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: runs[0].Run.ID})
		require.NoError(t, err)
		require.Empty(t, again.Released, "two in flight: nothing more")
		require.False(t, held(2))

		// A cancelled run is skipped; the sweep releases what a missed
		// RunFamilySettle owed.
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: runs[3].Run.ID, Reason: "no"})
		require.NoError(t, err)
		b.transition(t, runs[1].Run.ID, agentfleet.StatusRunning)
		b.transition(t, runs[1].Run.ID, agentfleet.StatusFailed)
		sw, err := b.s.BatchSweep(b.ctx, store.BatchSweepParams{})
		require.NoError(t, err)
		require.Len(t, sw.Released, 1)
		require.Equal(t, runs[4].Run.ID, sw.Released[0].ID)
		require.Empty(t, sw.Finished)

		// Once every run has ended, the sweep finishes the batch.
		for _, i := range []int{2, 4} {
			b.transition(t, runs[i].Run.ID, agentfleet.StatusRunning)
			b.transition(t, runs[i].Run.ID, agentfleet.StatusCompleted)
		}
		sw, err = b.s.BatchSweep(b.ctx, store.BatchSweepParams{})
		require.NoError(t, err)
		require.Len(t, sw.Finished, 1)
		require.Equal(t, store.BatchCompleted, sw.Finished[0].Status)
		require.False(t, sw.Finished[0].FinishedAt.IsZero())
		sw, err = b.s.BatchSweep(b.ctx, store.BatchSweepParams{})
		require.NoError(t, err)
		require.Empty(t, sw.Finished, "finished once")
	})

	t.Run("Cancel", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID}, 7, 7, 0)
		runs, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: bt.ID, AfterIndex: -1})
		require.NoError(t, err)
		b.transition(t, runs[0].Run.ID, agentfleet.StatusRunning)
		b.transition(t, runs[0].Run.ID, agentfleet.StatusCompleted)
		b.transition(t, runs[1].Run.ID, agentfleet.StatusRunning)

		var cancelled, stopping int
		for {
			res, err := b.s.BatchCancel(b.ctx, store.BatchCancelParams{ID: bt.ID, Tenant: ten.ID, Limit: 2})
			require.NoError(t, err)
			require.Equal(t, store.BatchCancelled, res.Batch.Status)
			for _, c := range res.Cancelled {
				require.Equal(t, agentfleet.StatusCancelled, c.Run.Status)
				require.Len(t, c.Events, 2)
			}
			cancelled += len(res.Cancelled)
			stopping += len(res.Stopping)
			if !res.More {
				break
			}
		}
		require.Equal(t, 5, cancelled)
		require.Equal(t, 1, stopping)
		require.True(t, b.get(t, runs[1].Run.ID).CancelRequested)
		// Again: a no-op.
		res, err := b.s.BatchCancel(b.ctx, store.BatchCancelParams{ID: bt.ID})
		require.NoError(t, err)
		require.Empty(t, res.Cancelled)
		require.Empty(t, res.Stopping)
		_, err = b.s.BatchCancel(b.ctx, store.BatchCancelParams{ID: bt.ID, Tenant: "other"})
		require.ErrorIs(t, err, store.ErrNotFound)

		got, err := b.s.BatchGetByID(b.ctx, store.BatchGetByIDParams{ID: bt.ID})
		require.NoError(t, err)
		require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: 1, agentfleet.StatusRunning: 1, agentfleet.StatusCancelled: 5}, got.Counts)
		b.transition(t, runs[1].Run.ID, agentfleet.StatusCancelled)
		sw, err := b.s.BatchSweep(b.ctx, store.BatchSweepParams{})
		require.NoError(t, err)
		require.Len(t, sw.Finished, 1)
		require.Equal(t, store.BatchCancelled, sw.Finished[0].Status)
	})

	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		_, err := b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: "nobody"})
		require.True(t, errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid), "%v", err)
		_, err = b.s.BatchGetByID(b.ctx, store.BatchGetByIDParams{ID: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.BatchList(b.ctx, store.BatchListParams{Tenant: "t", Cursor: "%%"})
		require.ErrorIs(t, err, store.ErrInvalid)
		held, err := b.s.BatchRunIsHeld(b.ctx, "nope")
		require.NoError(t, err)
		require.False(t, held)
	})
}
