package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Retention: RunDeleteEnded and RunDelete take ended runs away with their
// whole trace (steps, events, model replies, approvals) and keep the usage
// ledger; unfinished runs are never touched, whatever their age.
func testRetention(t *testing.T, newStore NewStore) {
	t.Run("DeleteEnded", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var old []agentfleet.Run
		for _, end := range []agentfleet.RunStatus{agentfleet.StatusCompleted, agentfleet.StatusFailed,
			agentfleet.StatusCancelled, agentfleet.StatusMaxTurns} {
			old = append(old, b.traced(t, ten.ID, end))
		}
		// Unfinished runs as old as any, with traces of their own.
		queued := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "waits"})
		running := b.traced(t, ten.ID, agentfleet.StatusRunning)
		parked := b.traced(t, ten.ID, agentfleet.StatusWaitingBudget)
		young := b.traced(t, ten.ID, agentfleet.StatusCompleted)
		cutoff := young.UpdatedAt // strictly after every other end
		require.True(t, old[len(old)-1].UpdatedAt.Before(cutoff))
		unfinished := []agentfleet.Run{queued, running, parked, young}
		kept := map[string][]agentfleet.Event{}
		for _, r := range unfinished {
			kept[r.ID] = b.events(t, r.ID)
		}

		n, err := b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: 100})
		require.NoError(t, err)
		require.Equal(t, len(old), n)
		for _, r := range old {
			b.requireGone(t, r)
		}
		for _, r := range unfinished {
			require.Equal(t, r.Status, b.get(t, r.ID).Status)
			require.Equal(t, kept[r.ID], b.events(t, r.ID), "run %s keeps its events", r.ID)
			require.NotEmpty(t, b.steps(t, r.ID))
		}
		_, err = b.s.ModelReplyGet(b.ctx, running.ID, 1)
		require.NoError(t, err, "a running run keeps its replies")

		// Billing history stays: the ledger still has every run's usage.
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Len(t, rows, len(old)+3, "the usage of every traced run, deleted or not")

		n, err = b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: 100})
		require.NoError(t, err)
		require.Zero(t, n, "nothing more is due")
		n, err = b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: young.UpdatedAt.Add(time.Microsecond), Limit: 100})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the young run, once due")
		b.requireGone(t, young)
		require.Equal(t, agentfleet.StatusRunning, b.get(t, running.ID).Status)
	})
	t.Run("Limit", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var ended []agentfleet.Run
		for range 5 {
			ended = append(ended, b.transition(t, b.started(t, ten.ID).ID, agentfleet.StatusCompleted))
		}
		cutoff := justAfter(ended[len(ended)-1].UpdatedAt)
		for i, want := range []int{2, 2, 1, 0} {
			n, err := b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: 2})
			require.NoError(t, err)
			require.Equal(t, want, n, "call %d", i)
			// Oldest first.
			for j, r := range ended {
				_, err := b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: r.ID})
				if j < 2*i+want {
					require.ErrorIs(t, err, store.ErrNotFound, "call %d, run %d", i, j)
				} else {
					require.NoError(t, err, "call %d, run %d", i, j)
				}
			}
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		const runs = 30
		var last agentfleet.Run
		for range runs {
			last = b.transition(t, b.started(t, ten.ID).ID, agentfleet.StatusFailed)
		}
		cutoff := justAfter(last.UpdatedAt)
		// Sweeps racing each other delete every run once between them.
		totals, errs := atOnce(4, func(int) (int, error) {
			total := 0
			for {
				n, err := b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: 4})
				if err != nil || n == 0 {
					return total, err
				}
				total += n
			}
		})
		sum := 0
		for i := range totals {
			require.NoError(t, errs[i])
			sum += totals[i]
		}
		require.Equal(t, runs, sum)
		list, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, list.Runs)
	})
	t.Run("Session", func(t *testing.T) {
		// Deleting a session's ended runs changes nothing about which of
		// its runs is next: only unfinished runs count.
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		sess := store.RunCreateParams{Tenant: ten.ID, SessionID: "s1", Message: "m"}
		first := b.run(t, sess)
		b.transition(t, first.ID, agentfleet.StatusRunning)
		b.transition(t, first.ID, agentfleet.StatusCompleted)
		head := b.run(t, sess)
		b.transition(t, head.ID, agentfleet.StatusRunning)
		next, err := b.s.RunCreate(b.ctx, sess)
		require.NoError(t, err)
		require.False(t, next.Startable, "behind the running head")

		n, err := b.s.RunDeleteEnded(b.ctx, store.RunDeleteEndedParams{EndedBefore: justAfter(next.Run.CreatedAt), Limit: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.requireGone(t, first)

		later, err := b.s.RunCreate(b.ctx, sess)
		require.NoError(t, err)
		require.False(t, later.Startable, "still behind the running head")
		res, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: head.ID, To: agentfleet.StatusCompleted})
		require.NoError(t, err)
		require.NotNil(t, res.SessionNext)
		require.Equal(t, next.Run.ID, res.SessionNext.ID, "the head's end hands out the next run")
	})
	t.Run("RunDelete", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		done := b.traced(t, ten.ID, agentfleet.StatusCompleted)
		running := b.traced(t, ten.ID, agentfleet.StatusRunning)
		parked := b.traced(t, ten.ID, agentfleet.StatusWaitingBudget)
		queued := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "waits"})

		require.ErrorIs(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: done.ID, Tenant: other.ID}), store.ErrNotFound,
			"another tenant's run")
		require.Equal(t, done, b.get(t, done.ID))
		for _, r := range []agentfleet.Run{running, parked, queued} {
			evs := b.events(t, r.ID)
			err := b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: r.ID, Tenant: ten.ID})
			require.ErrorIs(t, err, store.ErrConflict, "a %s run", r.Status)
			require.ErrorContains(t, err, "cancel it first")
			require.Equal(t, r.Status, b.get(t, r.ID).Status)
			require.Equal(t, evs, b.events(t, r.ID))
		}

		require.NoError(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: done.ID, Tenant: ten.ID}))
		b.requireGone(t, done)
		require.ErrorIs(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: done.ID, Tenant: ten.ID}), store.ErrNotFound, "deleted twice")
		require.ErrorIs(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: "nope"}), store.ErrNotFound)

		// Without a tenant (the admin) any tenant's ended run.
		b.transition(t, running.ID, agentfleet.StatusCancelled)
		require.NoError(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{ID: running.ID}))
		b.requireGone(t, running)
		require.Equal(t, agentfleet.StatusWaitingBudget, b.get(t, parked.ID).Status)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setupRetention(t, newStore)
		for name, p := range map[string]store.RunDeleteEndedParams{
			"no cutoff":  {Limit: 10},
			"zero limit": {EndedBefore: time.Now()},
			"over max":   {EndedBefore: time.Now(), Limit: store.RunDeleteEndedLimitMax + 1},
		} {
			_, err := b.s.RunDeleteEnded(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		require.ErrorIs(t, b.s.RunDelete(b.ctx, store.RunDeleteParams{}), store.ErrInvalid)
	})
}

// traced makes a run of tenant with a trace of every kind that belongs to
// it (steps and events of two turns, model replies charged to the usage
// ledger, journal entries, an approval, kept in b.approvals) and leaves it in status to.
func (b retentionBundle) traced(t *testing.T, tenant string, to agentfleet.RunStatus) agentfleet.Run {
	t.Helper()
	r := b.started(t, tenant)
	for turn := 1; turn <= 2; turn++ {
		_, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{
			ModelReply: store.ModelReply{RunID: r.ID, Turn: turn, Content: "reply", Model: "m1", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}},
			Charge:     &store.BudgetSettleParams{Tenant: tenant, RunID: r.ID, Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, Model: "m1"},
		})
		require.NoError(t, err)
		_, err = b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: agentfleet.JournalEntry{
			RunID: r.ID, Turn: turn, Primitive: "http", Method: "POST", URL: "https://example.com/", Result: json.RawMessage(`{"status":200}`)}})
		require.NoError(t, err)
		status := agentfleet.StatusRunning
		if turn == 2 && (to == agentfleet.StatusCompleted || to == agentfleet.StatusMaxTurns) {
			status = to
		}
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, turn, status, "t"))
		require.NoError(t, err)
	}
	if to == agentfleet.StatusFailed || to == agentfleet.StatusCancelled {
		// Parked on an approval of turn 3, then failed or cancelled.
		a := b.park(t, r.ID, 3, agentfleet.ApprovalCall{Index: 0, Primitive: "http", Method: "POST", URL: "https://example.com"})
		b.approvals[r.ID] = a.ID
	}
	switch to {
	case agentfleet.StatusFailed, agentfleet.StatusWaitingBudget:
		b.transition(t, r.ID, to)
	case agentfleet.StatusCancelled:
		_, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Reason: "stop", Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}}})
		require.NoError(t, err)
	}
	r = b.get(t, r.ID)
	require.Equal(t, to, r.Status)
	return r
}

// retentionBundle is a bundle that remembers the approval of each run
// traced made.
type retentionBundle struct {
	bundle
	approvals map[string]string
}

func setupRetention(t *testing.T, newStore NewStore) retentionBundle {
	t.Helper()
	return retentionBundle{bundle: setup(t, newStore), approvals: map[string]string{}}
}

// requireGone asserts that run r and everything that belonged to it are
// deleted.
func (b retentionBundle) requireGone(t *testing.T, r agentfleet.Run) {
	t.Helper()
	_, err := b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: r.ID})
	require.ErrorIs(t, err, store.ErrNotFound, "run %s", r.ID)
	require.Empty(t, b.steps(t, r.ID), "steps of %s", r.ID)
	require.Empty(t, b.events(t, r.ID), "events of %s", r.ID)
	for turn := 1; turn <= 2; turn++ {
		_, err = b.s.ModelReplyGet(b.ctx, r.ID, turn)
		require.ErrorIs(t, err, store.ErrNotFound, "reply %d of %s", turn, r.ID)
	}
	journal, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{RunID: r.ID})
	require.NoError(t, err)
	require.Empty(t, journal, "journal of %s", r.ID)
	if id, ok := b.approvals[r.ID]; ok {
		_, err = b.s.ApprovalGetByID(b.ctx, store.ApprovalGetByIDParams{ID: id})
		require.ErrorIs(t, err, store.ErrNotFound, "approval of %s", r.ID)
	}
}

// justAfter is a cutoff just after the latest end a test made.
func justAfter(last time.Time) time.Time { return last.Add(time.Microsecond) }
