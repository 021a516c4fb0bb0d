package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testChildren(t *testing.T, newStore NewStore) {
	// family is a running parent and children of it, created as spawn()
	// creates them.
	family := func(t *testing.T, b bundle, n int) (agentfleet.Run, []agentfleet.Run) {
		t.Helper()
		ten := b.tenant(t, store.TenantCreateParams{})
		parent := b.started(t, ten.ID)
		var kids []agentfleet.Run
		for range n {
			kids = append(kids, b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "child", ParentRunID: parent.ID, Depth: 1}))
		}
		return parent, kids
	}
	ids := func(rs []agentfleet.Run) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	// park commits parent's turn 1 waiting for kids.
	park := func(t *testing.T, b bundle, parent agentfleet.Run, kids []agentfleet.Run, until time.Time) agentfleet.Run {
		t.Helper()
		p := commitParams(parent.ID, 1, agentfleet.StatusWaitingChildren, "spawn")
		p.Spawned, p.WaitIDs, p.WaitUntil = len(kids), ids(kids), until
		ch, err := b.s.TurnCommit(b.ctx, p)
		require.NoError(t, err)
		return ch.Run
	}
	end := func(t *testing.T, b bundle, r agentfleet.Run, status agentfleet.RunStatus) {
		t.Helper()
		if r.Status == agentfleet.StatusQueued {
			b.transition(t, r.ID, agentfleet.StatusRunning)
		}
		b.transition(t, r.ID, status)
	}

	t.Run("CreateAndList", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 2)
		got := b.get(t, kids[0].ID)
		require.Equal(t, parent.ID, got.ParentRunID)
		require.Equal(t, 1, got.Depth)
		page, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: parent.Tenant, ParentRunID: parent.ID})
		require.NoError(t, err)
		require.ElementsMatch(t, ids(kids), ids(page.Runs))

		_, err = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: parent.Tenant, Message: "x", ParentRunID: parent.ID})
		require.ErrorIs(t, err, store.ErrInvalid, "a child names its depth")
	})

	t.Run("WaitParks", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 2)
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
		got := park(t, b, parent, kids, until)
		require.Equal(t, agentfleet.StatusWaitingChildren, got.Status)
		require.Equal(t, ids(kids), got.WaitIDs)
		require.True(t, until.Equal(got.WaitUntil))
		require.Equal(t, 2, got.Children)
		require.Equal(t, got, b.get(t, parent.ID))

		// Its next turn commits running and clears the wait.
		b.transition(t, parent.ID, agentfleet.StatusRunning)
		ch, err := b.s.TurnCommit(b.ctx, commitParams(parent.ID, 2, agentfleet.StatusRunning, "resumed"))
		require.NoError(t, err)
		require.Empty(t, ch.Run.WaitIDs)
		require.True(t, ch.Run.WaitUntil.IsZero())
		require.Equal(t, 2, ch.Run.Children)
	})

	t.Run("WaitForEndedChildrenDoesNotPark", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 2)
		end(t, b, kids[0], agentfleet.StatusCompleted)
		end(t, b, kids[1], agentfleet.StatusFailed)
		got := park(t, b, parent, kids, time.Time{})
		require.Equal(t, agentfleet.StatusRunning, got.Status, "nothing left to wait for")
		require.Equal(t, ids(kids), got.WaitIDs, "the next turn reads their results")
	})

	t.Run("LastChildWakesParent", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 2)
		parked := park(t, b, parent, kids, time.Time{})

		end(t, b, kids[0], agentfleet.StatusCompleted)
		res, err := b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: kids[0].ID})
		require.NoError(t, err)
		require.Empty(t, res.Woken, "one child is still running")
		require.Equal(t, agentfleet.StatusWaitingChildren, b.get(t, parent.ID).Status)

		end(t, b, kids[1], agentfleet.StatusCancelled)
		res, err = b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: kids[1].ID})
		require.NoError(t, err)
		require.Len(t, res.Woken, 1)
		require.Equal(t, parent.ID, res.Woken[0].ID)
		require.Equal(t, agentfleet.StatusRunning, res.Woken[0].Status)
		require.Equal(t, parked.Wake+1, res.Woken[0].Wake, "its next turn's message differs from the parked one's")
		require.Equal(t, res.Woken[0], b.get(t, parent.ID))

		again, err := b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: kids[1].ID})
		require.NoError(t, err)
		require.Empty(t, again.Woken, "a repeat wakes nothing")
	})

	t.Run("EndedParentCancelsChildren", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 3)
		b.transition(t, kids[1].ID, agentfleet.StatusRunning)
		grandchild := b.run(t, store.RunCreateParams{Tenant: parent.Tenant, Message: "gc", ParentRunID: kids[0].ID, Depth: 2})
		end(t, b, kids[2], agentfleet.StatusCompleted)
		end(t, b, parent, agentfleet.StatusFailed)

		res, err := b.s.RunFamilySettle(b.ctx, store.RunFamilySettleParams{ID: parent.ID})
		require.NoError(t, err)
		require.Equal(t, agentfleet.StatusCancelled, b.get(t, kids[0].ID).Status, "queued: cancelled at once")
		require.Equal(t, agentfleet.StatusCancelled, b.get(t, grandchild.ID).Status, "and its own children")
		require.Contains(t, b.get(t, kids[0].ID).Error, "parent run "+parent.ID+" ended (failed)")
		running := b.get(t, kids[1].ID)
		require.Equal(t, agentfleet.StatusRunning, running.Status)
		require.True(t, running.CancelRequested, "running: stopped at its next turn boundary")
		require.Equal(t, agentfleet.StatusCompleted, b.get(t, kids[2].ID).Status)
		require.Len(t, res.Stopping, 1)
		require.Equal(t, kids[1].ID, res.Stopping[0].ID)
		require.Len(t, res.Changes, 2)
		for _, ch := range res.Changes {
			require.Equal(t, []agentfleet.EventType{agentfleet.EventCancelled, agentfleet.EventDone},
				[]agentfleet.EventType{ch.Events[0].Type, ch.Events[1].Type})
			require.Equal(t, b.events(t, ch.Run.ID)[len(b.events(t, ch.Run.ID))-2:], ch.Events, "the events returned are the ones stored")
		}
	})

	t.Run("Sweep", func(t *testing.T) {
		b := setup(t, newStore)
		// A wait that timed out, and a parent that ended while nobody
		// settled its children.
		timedOut, slowKids := family(t, b, 1)
		park(t, b, timedOut, slowKids, time.Now().Add(-time.Second))
		orphaner, orphans := family(t, b, 2)
		end(t, b, orphaner, agentfleet.StatusCompleted)
		// And one that is not due.
		waiting, busyKids := family(t, b, 1)
		park(t, b, waiting, busyKids, time.Time{})

		res, err := b.s.RunFamilySettleDue(b.ctx, store.RunFamilySettleDueParams{Now: time.Now()})
		require.NoError(t, err)
		require.Equal(t, []string{timedOut.ID}, ids(res.Woken))
		require.Equal(t, agentfleet.StatusRunning, b.get(t, timedOut.ID).Status)
		require.Equal(t, agentfleet.StatusQueued, b.get(t, slowKids[0].ID).Status, "a timed-out wait leaves the children be")
		for _, o := range orphans {
			require.Equal(t, agentfleet.StatusCancelled, b.get(t, o.ID).Status)
		}
		require.Equal(t, agentfleet.StatusWaitingChildren, b.get(t, waiting.ID).Status)

		res, err = b.s.RunFamilySettleDue(b.ctx, store.RunFamilySettleDueParams{Now: time.Now()})
		require.NoError(t, err)
		require.Empty(t, res.Woken)
		require.Empty(t, res.Changes)
	})

	t.Run("UsageOfChildren", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 2)
		grandchild := b.run(t, store.RunCreateParams{Tenant: parent.Tenant, Message: "gc", ParentRunID: kids[0].ID, Depth: 2})
		for _, r := range []agentfleet.Run{kids[0], kids[1], grandchild} {
			b.transition(t, r.ID, agentfleet.StatusRunning)
			_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "work"))
			require.NoError(t, err)
		}
		u, err := b.s.RunChildrenUsage(b.ctx, parent.ID)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Usage{PromptTokens: 30, CompletionTokens: 15}, u)
		u, err = b.s.RunChildrenUsage(b.ctx, kids[1].ID)
		require.NoError(t, err)
		require.Zero(t, u)
	})

	t.Run("WaitingRunsAreNotActive", func(t *testing.T) {
		b := setup(t, newStore)
		parent, kids := family(t, b, 1)
		park(t, b, parent, kids, time.Time{})
		other := b.started(t, parent.Tenant)
		n, err := b.s.RunCountActive(b.ctx, parent.Tenant)
		require.NoError(t, err)
		require.Equal(t, 1, n, "only %s runs; the parent waits", other.ID)
	})
}
