package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl runs steps prints a run's trace with its journal.
func TestRunsSteps(t *testing.T) {
	f := newCLIFixture(t)
	ctx, st, agentctl := f.ctx, f.st, f.agentctl
	r, err := f.c.CreateRun(ctx, wire.RunCreateRequest{Message: "pay the invoice"})
	require.NoError(t, err)
	_, err = st.RunTransition(ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusRunning})
	require.NoError(t, err)
	_, err = st.JournalRecord(ctx, store.JournalRecordParams{JournalEntry: agentfleet.JournalEntry{
		RunID: r.ID, Turn: 1, Primitive: "http", Method: "POST", URL: "https://billing.example/pay", Error: "http POST https://billing.example/pay: timed out after 30s"}})
	require.NoError(t, err)

	code, stdout, stderr := agentctl("runs", "steps", r.ID)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "pay the invoice")
	require.Contains(t, stdout, "POST https://billing.example/pay -> error: http POST https://billing.example/pay: timed out after 30s")

	code, stdout, _ = agentctl("runs", "steps", "--json", "--turn", "1", r.ID)
	require.Equal(t, exitOK, code)
	var got wire.RunSteps
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Empty(t, got.Steps, "turn 1 has not committed")
	require.Len(t, got.Journal, 1)

	code, _, stderr = agentctl("runs", "steps")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "runs steps takes one RUN id")
}
