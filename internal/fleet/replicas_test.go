package fleet_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/fleet"
)

// A fleet started with a new AGENTFLEET_NATS_REPLICAS changes the streams
// an earlier fleet made: its dispatcher applies it once it leads.
func TestDispatcherAppliesReplicas(t *testing.T) {
	t.Parallel()
	c := bustest.StartCluster(t, 3)
	before := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) { cfg.Replicas = 1; cfg.RequestTimeout = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all, err := before.Replicas(ctx)
	require.NoError(t, err)
	for _, r := range all {
		require.Equal(t, 1, r.Replicas, r.Stream)
	}

	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fleet.RunDispatcher(dctx, fleet.Config{
			NATSURL: c.URL(), NATSReplicas: 3, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", DataDir: t.TempDir(),
		}, slog.New(slog.DiscardHandler))
	}()
	require.Eventually(t, func() bool {
		all, err := before.Replicas(ctx)
		if err != nil {
			return false
		}
		names := map[string]bool{}
		for _, r := range all {
			if r.Replicas != 3 {
				return false
			}
			names[r.Stream] = true
		}
		return names["AF_RUNQ"] && names["KV_AF_LEASE_scheduler"]
	}, 45*time.Second, 100*time.Millisecond, "the dispatcher never applied 3 replicas")
	stop()
	require.NoError(t, <-done)
}
