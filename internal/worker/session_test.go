package worker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// A session run's history is read once and kept for its later turns; a
// run without a session reads nothing at all.
func TestSessionHistoryIsReadOncePerRunAndOnlyForSessions(t *testing.T) {
	ctx := context.Background()
	// No store: a run without a session must not need one.
	none := newSessionCache(nil)
	h, err := none.get(ctx, agentfleet.Run{ID: "r", Tenant: "acme"})
	require.NoError(t, err)
	require.Nil(t, h)

	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "w.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	earlier, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", SessionID: "s", Message: "first"})
	require.NoError(t, err)
	_, err = st.RunTransition(ctx, store.RunTransitionParams{ID: earlier.Run.ID, To: agentfleet.StatusRunning})
	require.NoError(t, err)
	_, err = st.TurnCommit(ctx, store.TurnCommitParams{RunID: earlier.Run.ID, Turn: 1, Status: agentfleet.StatusCompleted,
		Args: json.RawMessage(`{"k":1}`), Answer: json.RawMessage(`"done"`),
		Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: "It is done."}}})
	require.NoError(t, err)
	current, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", SessionID: "s", Message: "second"})
	require.NoError(t, err)

	c := newSessionCache(st)
	h, err = c.get(ctx, current.Run)
	require.NoError(t, err)
	require.Len(t, h, 1)
	require.Equal(t, "first", h[0].Run.Message)
	require.JSONEq(t, `{"k":1}`, string(h[0].Run.Args))

	// The earlier runs stay as they were while the run goes on: its
	// next turn reads nothing (the store is gone and it still works).
	require.NoError(t, st.Close())
	again, err := c.get(ctx, current.Run)
	require.NoError(t, err)
	require.Equal(t, h, again)
	c.forget(current.Run.ID)
	_, err = c.get(ctx, current.Run)
	require.Error(t, err, "forgotten once the run ended: read anew")
}
