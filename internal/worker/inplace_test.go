package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// The load a worker builds for a turn it runs in place (the run as the
// commit returned it, the history it had plus the steps just committed)
// is the load TurnLoad would read for that turn, across the edge of the
// history window.
func TestInPlaceLoadIsWhatTurnLoadReads(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "w.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	sb, err := sandbox.New(sandbox.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	// A window of two turns: from turn 4 on, the oldest loaded turn
	// drops out of the next one's history.
	eng, err := loop.New(loop.Config{Model: llm.NewScripted(), Sandbox: sb, HistoryWindow: 2})
	require.NoError(t, err)
	w := &Worker{cfg: Config{Engine: eng}, drainCtx: context.Background()}

	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	created, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "count"})
	require.NoError(t, err)
	run := created.Run
	_, err = st.SkillPut(ctx, store.SkillPutParams{Tenant: "acme", Name: "counting", Description: "Count to five", Body: "n + 1"})
	require.NoError(t, err)

	load := func(turn int) store.TurnLoadResult {
		t.Helper()
		ld, err := st.TurnLoad(ctx, store.TurnLoadParams{RunID: run.ID, Turn: turn, HistoryFrom: eng.HistoryFrom(turn)})
		require.NoError(t, err)
		return ld
	}
	for n := 1; n <= 5; n++ {
		ld := load(n)
		args, _ := json.Marshal(map[string]int{"n": n})
		ch, err := st.TurnCommit(ctx, store.TurnCommitParams{
			RunID: run.ID, Turn: n, Status: agentfleet.StatusRunning, Args: args,
			Steps: []agentfleet.Step{
				{Kind: agentfleet.StepModel, Content: fmt.Sprintf("reply %d", n), Model: "m", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 2}},
				{Kind: agentfleet.StepObservation, Content: fmt.Sprintf("observed %d", n)},
			},
			Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 2},
		})
		require.NoError(t, err)

		prev := bus.Turn{RunID: run.ID, Tenant: "acme", Turn: n, Direct: true}
		next, got := w.inPlace(prev, ch, ld)
		require.Equal(t, bus.Turn{RunID: run.ID, Tenant: "acme", Turn: n + 1}, next, "the next turn is not Direct itself")

		want := load(n + 1)
		require.Equal(t, want.Run, got.Run, "after turn %d", n)
		require.Equal(t, want.TenantUnlimited, got.TenantUnlimited)
		require.Positive(t, want.SkillsRevision)
		require.Equal(t, want.SkillsRevision, got.SkillsRevision)
		require.True(t, got.HistoryLoaded)
		require.Len(t, got.Steps, len(want.Steps), "after turn %d", n)
		for i, s := range got.Steps {
			require.True(t, want.Steps[i].CreatedAt.Equal(s.CreatedAt), "step %d", i)
			s.CreatedAt = want.Steps[i].CreatedAt
			require.Equal(t, want.Steps[i], s, "after turn %d: step %d", n, i)
		}
		require.Equal(t, max(1, n-1), got.Steps[0].Turn, "after turn %d: the window's first turn", n)

	}
}
