package fleet_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// A worker's budget reservations outlive its slowest model call, retries
// included, and the retried record of the reply: a lease that ran out
// mid-call would give the tokens to another call while this one spends
// them.
func TestReservationLeaseOutlivesTheLongestModelCall(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	b := bustest.Connect(t, bustest.StartServer(t))
	for _, c := range []struct {
		model llm.Config
		// attempts is the least the call can take: every attempt
		// timing out.
		attempts time.Duration
	}{
		{llm.Config{Model: "m", BaseURL: "http://127.0.0.1:1/v1"}, llm.MaxAttemptsDefault * llm.CallTimeoutDefault},
		{llm.Config{Model: "m", BaseURL: "http://127.0.0.1:1/v1", CallTimeout: 10 * time.Minute, MaxAttempts: 3}, 30 * time.Minute},
	} {
		wp, err := fleet.NewWorkerProcess(fleet.WorkerConfig{Model: c.model, Store: st, Bus: b})
		require.NoError(t, err)
		longest := llm.LongestCall(c.model)
		require.Greater(t, longest, c.attempts, "the waits between attempts count too")
		require.Greater(t, wp.Meter.Lease(), longest+loop.RecordRetryForDefault, "model %+v", c.model)
		require.NoError(t, wp.Close())
	}
}
