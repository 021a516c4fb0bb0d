package bustest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestEmbeddedServerAndConnect(t *testing.T) {
	t.Parallel()
	e := bustest.StartServer(t)
	require.NotEmpty(t, e.ClientURL())
	inProc := bustest.Connect(t, e)
	byURL := bustest.ConnectURL(t, e.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, inProc.Ready(ctx))
	require.NoError(t, byURL.Ready(ctx))
}

func TestInProcessOnlyServer(t *testing.T) {
	t.Parallel()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	require.NoError(t, err)
	dir := e.StoreDir()
	require.DirExists(t, dir)
	require.Empty(t, e.ClientURL(), "an in-process server has no URL")
	b := bustest.Connect(t, e)
	require.NoError(t, b.Ready(context.Background()))
	require.NoError(t, b.Close())
	e.Shutdown()
	e.Shutdown() // idempotent
	require.NoDirExists(t, dir, "temporary store left behind")
}

// TestServerProcess builds nats-server from the module in go.mod, runs it
// as a separate process, uses it, and restarts it on the same port and
// store: the recipe multi-process tests follow.
func TestServerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server")
	}
	t.Parallel()
	bin := bustest.BuildServerBinary(t)
	require.Equal(t, bin, bustest.BuildServerBinary(t), "built twice")
	srv := bustest.StartServerProcess(t, bin, 0, "")
	require.NotZero(t, srv.Port)
	require.NotEqual(t, 4222, srv.Port)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := bustest.ConnectURL(t, srv.URL, func(c *bus.Config) { c.PullExpiry = 500 * time.Millisecond })
	turn := bus.Turn{Tenant: "acme", RunID: "r1", Turn: 1}
	require.NoError(t, b.EnqueueTurn(ctx, turn))

	srv.Stop()
	srv = bustest.StartServerProcess(t, bin, srv.Port, srv.StoreDir)
	require.NoError(t, b.WaitReady(ctx))
	src, err := b.TurnSource(ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	d, err := src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, turn, d.Turn, "the queued turn survived the restart")
	require.NoError(t, d.Ack(ctx))
}

func TestEmbeddedPortInUse(t *testing.T) {
	t.Parallel()
	e := bustest.StartServer(t)
	_, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: e.Listen(), ReadyTimeout: 500 * time.Millisecond})
	require.Error(t, err)
}
