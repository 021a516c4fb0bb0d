package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Sessions: a session is the runs of one tenant's session id, listed
// newest updated first, read with its runs in order and its newest
// summary step, and deleted whole once every run of it ended.
func testSessions(t *testing.T, newStore NewStore) {
	t.Run("ListGet", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "coder"})
		require.NoError(t, err)

		a1 := b.sessionRun(t, ten.ID, "default", "a", agentfleet.StatusCompleted)
		bRun := b.sessionRun(t, ten.ID, "default", "b", agentfleet.StatusFailed)
		a2 := b.sessionRun(t, ten.ID, "coder", "a", agentfleet.StatusQueued)
		b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "no session"})
		b.sessionRun(t, other.ID, "default", "a", agentfleet.StatusCompleted)
		a2 = b.get(t, a2.ID)

		list, err := b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, list.NextCursor)
		require.Len(t, list.Sessions, 2)
		a := list.Sessions[0]
		require.NotZero(t, a1.Usage.Total())
		require.Equal(t, store.Session{ID: "a", Tenant: ten.ID, Agent: "coder", Runs: 2, LastRunID: a2.ID,
			LastStatus: agentfleet.StatusQueued, Usage: a1.Usage.Add(a2.Usage),
			CreatedAt: a1.CreatedAt, UpdatedAt: a2.UpdatedAt}, a, "the latest run's agent and status, the runs' usage summed")
		bRun = b.get(t, bRun.ID)
		require.Equal(t, store.Session{ID: "b", Tenant: ten.ID, Agent: "default", Runs: 1, LastRunID: bRun.ID,
			LastStatus: agentfleet.StatusFailed, Usage: bRun.Usage,
			CreatedAt: bRun.CreatedAt, UpdatedAt: bRun.UpdatedAt}, list.Sessions[1])

		// Pages of one continue where the last ended.
		p1, err := b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []store.Session{a}, p1.Sessions)
		require.NotEmpty(t, p1.NextCursor)
		p2, err := b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID, Limit: 1, Cursor: p1.NextCursor})
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, sessionIDs(p2.Sessions))
		require.Empty(t, p2.NextCursor)

		coder, err := b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID, Agent: "coder"})
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, sessionIDs(coder.Sessions), "by the latest run's agent")
		def, err := b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID, Agent: "default"})
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, sessionIDs(def.Sessions), "a's earlier run is default's, its latest is not")

		_, err = b.s.SessionList(b.ctx, store.SessionListParams{Tenant: ten.ID, Cursor: "nope"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.SessionList(b.ctx, store.SessionListParams{})
		require.ErrorIs(t, err, store.ErrInvalid)

		d, err := b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: ten.ID, ID: "a"})
		require.NoError(t, err)
		require.Equal(t, a, d.Session)
		require.Equal(t, []string{a1.ID, a2.ID}, runIDs(d.RunList), "oldest first")
		require.Equal(t, "task a", d.RunList[0].Message)
		require.JSONEq(t, `"answer a"`, string(d.RunList[0].Answer))
		require.Nil(t, d.Checkpoint, "no summary step")

		_, err = b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: ten.ID, ID: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: "nobody", ID: "a"})
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's session of that id is not found")
	})
	t.Run("Checkpoint", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		summarized := func(status agentfleet.RunStatus, summaries ...string) agentfleet.Run {
			t.Helper()
			r := b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: "s", Message: "go"})
			b.transition(t, r.ID, agentfleet.StatusRunning)
			p := commitParams(r.ID, 1, status, "x")
			for _, s := range summaries {
				p.Steps = append(p.Steps, agentfleet.Step{Kind: agentfleet.StepSummary, Content: s})
			}
			_, err := b.s.TurnCommit(b.ctx, p)
			require.NoError(t, err)
			return r
		}
		first := summarized(agentfleet.StatusCompleted, "older", "old")
		d, err := b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: ten.ID, ID: "s"})
		require.NoError(t, err)
		require.NotNil(t, d.Checkpoint)
		require.Equal(t, agentfleet.Step{RunID: first.ID, Turn: 1, Index: 3, Kind: agentfleet.StepSummary, Content: "old",
			CreatedAt: d.Checkpoint.CreatedAt}, *d.Checkpoint, "the run's newest summary")

		second := summarized(agentfleet.StatusCompleted, "new")
		summarized(agentfleet.StatusCompleted) // a later run with none
		d, err = b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: ten.ID, ID: "s"})
		require.NoError(t, err)
		require.Len(t, d.RunList, 3)
		require.Equal(t, second.ID, d.Checkpoint.RunID, "the newest summary among the session's runs")
		require.Equal(t, "new", d.Checkpoint.Content)
	})
	t.Run("Delete", func(t *testing.T) {
		b := setupRetention(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		done := b.sessionRun(t, ten.ID, "default", "s", agentfleet.StatusCompleted)
		failed := b.sessionRun(t, ten.ID, "default", "s", agentfleet.StatusFailed)
		waiting := b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: "s", Message: "later"})
		kept := b.sessionRun(t, ten.ID, "default", "t", agentfleet.StatusCompleted)
		theirs := b.sessionRun(t, other.ID, "default", "s", agentfleet.StatusCompleted)

		_, err := b.s.SessionDelete(b.ctx, store.SessionDeleteParams{Tenant: ten.ID, ID: "s"})
		require.ErrorIs(t, err, store.ErrConflict, "a run of it is queued")
		require.Contains(t, err.Error(), waiting.ID)
		for _, r := range []agentfleet.Run{done, failed, waiting} {
			require.NotEmpty(t, b.steps(t, r.ID), "nothing deleted")
		}

		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: waiting.ID, Reason: "stop"})
		require.NoError(t, err)
		n, err := b.s.SessionDelete(b.ctx, store.SessionDeleteParams{Tenant: ten.ID, ID: "s"})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, r := range []agentfleet.Run{done, failed} {
			b.requireGone(t, r)
		}
		_, err = b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: waiting.ID})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SessionGet(b.ctx, store.SessionGetParams{Tenant: ten.ID, ID: "s"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SessionDelete(b.ctx, store.SessionDeleteParams{Tenant: ten.ID, ID: "s"})
		require.ErrorIs(t, err, store.ErrNotFound, "deleted already")

		require.Equal(t, agentfleet.StatusCompleted, b.get(t, kept.ID).Status, "another session stays")
		require.Equal(t, agentfleet.StatusCompleted, b.get(t, theirs.ID).Status, "another tenant's session of that id stays")
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Len(t, rows, 3, "the ledger keeps the usage of the runs deleted")

		_, err = b.s.SessionDelete(b.ctx, store.SessionDeleteParams{Tenant: ten.ID})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

// sessionRun makes a run of agent in tenant's session, with the trace
// traced gives (two turns, 20 prompt and 10 completion tokens, answer
// "answer <session>" when completed), and leaves it in status to
// (queued: as created).
func (b retentionBundle) sessionRun(t *testing.T, tenant, agent, session string, to agentfleet.RunStatus) agentfleet.Run {
	t.Helper()
	r := b.run(t, store.RunCreateParams{Tenant: tenant, Agent: agent, SessionID: session, Message: "task " + session})
	if to == agentfleet.StatusQueued {
		return r
	}
	b.transition(t, r.ID, agentfleet.StatusRunning)
	for turn := 1; turn <= 2; turn++ {
		_, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{
			ModelReply: store.ModelReply{RunID: r.ID, Turn: turn, Content: "reply", Model: "m1", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}},
			Charge:     &store.BudgetSettleParams{Tenant: tenant, RunID: r.ID, Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, Model: "m1"},
		})
		require.NoError(t, err)
		status := agentfleet.StatusRunning
		if turn == 2 && to == agentfleet.StatusCompleted {
			status = to
		}
		p := commitParams(r.ID, turn, status, "t")
		if status == agentfleet.StatusCompleted {
			p.Answer = json.RawMessage(`"answer ` + session + `"`)
		}
		_, err = b.s.TurnCommit(b.ctx, p)
		require.NoError(t, err)
	}
	if to != agentfleet.StatusCompleted {
		b.transition(t, r.ID, to)
	}
	return b.get(t, r.ID)
}

func sessionIDs(ss []store.Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

func runIDs(rs []agentfleet.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
