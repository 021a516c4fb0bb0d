package drivertest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// commit is a turn commit as rules.TurnCommit fills it in: steps and
// events of the turn, timestamped, not numbered.
func commit(id string, turn int, to agentfleet.RunStatus, content string) store.TurnCommitParams {
	at := now()
	return store.TurnCommitParams{
		RunID: id, Turn: turn, Status: to, Args: json.RawMessage(`{"n":1}`),
		Usage: agentfleet.Usage{PromptTokens: 3, CompletionTokens: 4}, DataBytesCarried: 5,
		Steps: []agentfleet.Step{{RunID: id, Turn: turn, Index: 0, Kind: agentfleet.StepModel, Content: content, CreatedAt: at}},
		Events: []agentfleet.Event{
			{V: agentfleet.EventVersion, Type: agentfleet.EventModelCall, Turn: turn, TS: at, Content: content},
			{V: agentfleet.EventVersion, Type: agentfleet.EventLog, Turn: turn, TS: at},
		},
	}
}

func exerciseTurnCommit(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("Applied", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		id := run(t, b, "t1")
		before, err := b.Driver.RunGet(ctx, id)
		require.NoError(t, err)
		at := now()
		out, err := b.Driver.TurnCommitApply(ctx, []store.TurnCommitParams{commit(id, 1, agentfleet.StatusRunning, "one")}, at)
		require.NoError(t, err)
		require.Len(t, out, 1)
		a := out[0]
		require.True(t, a.Applied)
		require.Equal(t, 1, a.Run.Turn)
		require.Equal(t, agentfleet.StatusRunning, a.Run.Status)
		require.JSONEq(t, `{"n":1}`, string(a.Run.Args))
		require.Equal(t, agentfleet.Usage{PromptTokens: 3, CompletionTokens: 4}, a.Run.Usage)
		require.Equal(t, int64(5), a.Run.DataBytesCarried)
		require.Equal(t, at, a.Run.UpdatedAt)
		require.Equal(t, before.EventSeq, a.LastSeq)
		require.Equal(t, before.EventSeq+2, a.Run.EventSeq)
		require.Nil(t, a.Head, "the run has no session")

		read, err := b.Driver.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, a.Run, read)
		steps, err := b.Driver.StepList(ctx, id, 1, 2)
		require.NoError(t, err)
		require.Len(t, steps, 1)
		require.Equal(t, "one", steps[0].Content)
		evs, err := b.Driver.EventList(ctx, store.EventListByRunParams{RunID: id, AfterSeq: before.EventSeq})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, []int64{before.EventSeq + 1, before.EventSeq + 2}, []int64{evs[0].Seq, evs[1].Seq})
		require.Equal(t, "one", evs[0].Content)
		require.Equal(t, agentfleet.EventLog, evs[1].Type)

		// A commit without args keeps the stored ones.
		c := commit(id, 2, agentfleet.StatusCompleted, "two")
		c.Args = nil
		out, err = b.Driver.TurnCommitApply(ctx, []store.TurnCommitParams{c}, now())
		require.NoError(t, err)
		require.True(t, out[0].Applied)
		require.JSONEq(t, `{"n":1}`, string(out[0].Run.Args))
		require.Equal(t, agentfleet.StatusCompleted, out[0].Run.Status)
	})
	t.Run("LostWritesNothing", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		fresh, ended, ok := run(t, b, "t1"), run(t, b, "t1"), run(t, b, "t1")
		end(t, b, ended)
		runs := map[string]driver.RunRow{}
		for _, id := range []string{fresh, ended} {
			r, err := b.Driver.RunGet(ctx, id)
			require.NoError(t, err)
			runs[id] = r
		}
		out, err := b.Driver.TurnCommitApply(ctx, []store.TurnCommitParams{
			commit(fresh, 2, agentfleet.StatusRunning, "another turn"),
			commit(fresh, 1, agentfleet.StatusWaitingApproval, "a move queued may not make"),
			commit(ended, 1, agentfleet.StatusRunning, "ended"),
			commit("nope", 1, agentfleet.StatusRunning, "missing"),
			commit(ok, 1, agentfleet.StatusRunning, "the one that applies"),
		}, now())
		require.NoError(t, err)
		require.Len(t, out, 5)
		for i := range 4 {
			require.Equal(t, driver.TurnApplied{}, out[i], "commit %d lost its fence", i)
		}
		require.True(t, out[4].Applied, "the others still apply")
		require.Equal(t, 1, out[4].Run.Turn)
		for id, was := range runs {
			r, err := b.Driver.RunGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, was, r, "the lost commits changed nothing")
			steps, err := b.Driver.StepList(ctx, id, 1, 3)
			require.NoError(t, err)
			require.Empty(t, steps)
			evs, err := b.Driver.EventList(ctx, store.EventListByRunParams{RunID: id, AfterSeq: was.EventSeq})
			require.NoError(t, err)
			require.Empty(t, evs)
		}

		got, err := b.Driver.TurnCommitRunsGet(ctx, []string{fresh, ended, "nope"})
		require.NoError(t, err)
		require.ElementsMatch(t, []driver.RunRow{runs[fresh], runs[ended]}, got, "a missing run is left out")
	})
	t.Run("Several", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		x, y := run(t, b, "t1"), run(t, b, "t1")
		mk := func() string {
			res, err := b.Store.RunCreate(ctx, store.RunCreateParams{Tenant: "t1", Message: "hi", SessionID: "s1"})
			require.NoError(t, err)
			return res.Run.ID
		}
		head, next := mk(), mk()
		ended := commit(head, 1, agentfleet.StatusCompleted, "done")
		ended.Answer = json.RawMessage(`"ok"`)
		out, err := b.Driver.TurnCommitApply(ctx, []store.TurnCommitParams{
			commit(x, 1, agentfleet.StatusRunning, "x1"),
			commit(y, 1, agentfleet.StatusRunning, "y1"),
			commit(x, 2, agentfleet.StatusRunning, "x2"),
			ended,
		}, now())
		require.NoError(t, err)
		require.Len(t, out, 4)
		for i, a := range out {
			require.True(t, a.Applied, "commit %d", i)
		}
		require.Equal(t, 1, out[0].Run.Turn)
		require.Equal(t, 2, out[2].Run.Turn, "a run named twice advances turn by turn")
		require.Equal(t, out[0].Run.EventSeq, out[2].LastSeq, "its second commit's events follow its first's")
		require.Equal(t, y, out[1].Run.ID)
		require.Nil(t, out[0].Head)

		require.Equal(t, agentfleet.StatusCompleted, out[3].Run.Status)
		require.JSONEq(t, `"ok"`, string(out[3].Run.Answer))
		require.NotNil(t, out[3].Head, "the session's oldest unfinished run once the set applied")
		require.Equal(t, next, out[3].Head.ID)
		require.Equal(t, agentfleet.StatusQueued, out[3].Head.Status)

		steps, err := b.Driver.StepList(ctx, x, 1, 3)
		require.NoError(t, err)
		require.Len(t, steps, 2)
		require.Equal(t, []string{"x1", "x2"}, []string{steps[0].Content, steps[1].Content})
		evs, err := b.Driver.EventList(ctx, store.EventListByRunParams{RunID: x, AfterSeq: out[0].LastSeq})
		require.NoError(t, err)
		require.Len(t, evs, 4)
		for i, e := range evs {
			require.Equal(t, out[0].LastSeq+int64(i)+1, e.Seq)
		}
		require.Equal(t, "x2", evs[2].Content)
	})
}
