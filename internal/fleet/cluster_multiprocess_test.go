package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// streamLeader waits until the fleet stream named by suffix (AF_<suffix>)
// has a leader and returns its server name.
func streamLeader(t *testing.T, ctx context.Context, b *bus.Bus, stream string) string {
	t.Helper()
	for {
		all, err := b.Replicas(ctx)
		if err == nil {
			for _, r := range all {
				if r.Stream == stream && r.Leader != "" {
					return r.Leader
				}
			}
		}
		require.NoError(t, ctx.Err(), "stream %s has no leader (last error: %v)", stream, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMultiProcessFleetSurvivesNATSNodeLoss runs the fleet on a 3-node
// JetStream cluster of nats-server processes with R3 streams. Under load
// the node leading AF_WORK is SIGKILLed and comes back as a new machine
// (empty store); once every stream's replicas are current again, the node
// leading AF_RUNQ is SIGKILLed and stays down. Every run completes, and
// no turn is committed twice. (internal/bus's TestClusterNodeLoss shows
// the same losses strand R1 streams' turns.)
func TestMultiProcessFleetSurvivesNATSNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries")
	}
	baseURL, schema := pgtest.Schema(t)
	dispatcherBin, workerBin := buildFleet(t)
	nats := bustest.StartProcessCluster(t, bustest.BuildServerBinary(t), 3)
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: baseURL, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	model, err := fakeserver.Start(fakeserver.Config{Responder: threeTurns, Latency: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })

	apiPort := freePort(t)
	common := []string{
		"AGENTFLEET_NATS_URL=" + nats.URL(),
		"AGENTFLEET_NATS_REPLICAS=3",
		"AGENTFLEET_DATABASE_URL=" + withQuery(t, baseURL, "search_path", schema),
		"AGENTFLEET_ACK_WAIT=3s",
		"AGENTFLEET_STRANDED_INTERVAL=2s", "AGENTFLEET_STRANDED_AFTER=5s",
		"AGENTFLEET_DATA_DIR=" + t.TempDir(),
	}
	startProc(t, "dispatcher", dispatcherBin, append(common,
		fmt.Sprintf("AGENTFLEET_LISTEN=127.0.0.1:%d", apiPort), "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN=admin-secret"))
	for i := range 2 {
		startProc(t, fmt.Sprintf("worker%d", i), workerBin, append(common,
			"AGENTFLEET_WORKER_SLOTS=8", "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0",
			"AGENTFLEET_MODEL=fake-model", "OPENAI_BASE_URL="+model.URL()))
	}
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	waitDispatcherReady(t, apiURL)

	// An observer reads where the streams' copies are, changing nothing.
	obs := bustest.ConnectURL(t, nats.URL(), func(c *bus.Config) { c.Observer = true; c.RequestTimeout = 2 * time.Second })
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		all, err := obs.Replicas(wctx)
		if err != nil {
			return false
		}
		for _, r := range all {
			if r.Replicas != 3 {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the streams never had 3 replicas")

	const runs = 40
	tenant, ids := submitComputeRuns(t, apiURL, runs)
	completed := func() int { return completedRuns(t, st) }
	require.Eventually(t, func() bool { return completed() >= 5 }, 60*time.Second, 10*time.Millisecond)

	start := time.Now()
	work := nats.Index(streamLeader(t, wctx, obs, "AF_WORK"))
	nats.Kill(work)
	nats.Start(work, true)
	require.Eventually(t, func() bool {
		all, err := obs.Replicas(wctx)
		if err != nil {
			return false
		}
		for _, r := range all {
			if !r.Current() {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "the replaced node's replicas never became current")
	t.Logf("%s: node %d (AF_WORK's leader) replaced, its replicas current; %d runs completed", time.Since(start), work, completed())
	nats.Kill(nats.Index(streamLeader(t, wctx, obs, "AF_RUNQ")))

	requireComputed(t, st, tenant, ids, 90*time.Second)
	t.Logf("%s: %d runs completed; %d model calls for %d turns", time.Since(start), runs, len(model.Received()), 3*runs)
}
