package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/fleet"
)

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// The metrics name every tenant: the dispatcher serves them on its
// metrics listener, and its API port, open to anyone, does not.
func TestDispatcherServesMetricsOnItsOwnListener(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)
	f.requireCompletes("compute 3", `"result 7"`)

	require.NotEmpty(t, f.dispatcher.MetricsURL())
	status, body := get(t, f.dispatcher.MetricsURL())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `agentfleet_scheduler_forwarded_turns_total{tenant="acme"}`)
	require.Contains(t, body, "agentfleet_scheduler_leading 1")

	status, body = get(t, f.dispatcher.URL()+"/metrics")
	require.Equal(t, http.StatusNotFound, status, body)
	require.NotContains(t, body, "acme")
	require.NotContains(t, body, "agentfleet_")
}

// Dev mode runs the dispatcher and the workers in one process, on one
// registry, and one metrics listener serves all of it.
func TestDevServesTheWholeProcessMetricsOnOneListener(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dev, err := fleet.StartDev(ctx, fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", DataDir: t.TempDir(),
		Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	// Not its error: a scheduler stopped during its setup reports the
	// cancel as one (internal/scheduler's lead).
	defer func() { cancel(); <-done }()

	require.Equal(t, dev.Dispatcher.MetricsURL(), dev.MetricsURL())
	status, body := get(t, dev.MetricsURL())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "agentfleet_scheduler_leading ", "the dispatcher's")
	require.Contains(t, body, `agentfleet_sandbox_processes{state="idle"}`, "the workers'")
	require.Contains(t, body, "go_goroutines ", "the process's")

	status, _ = get(t, dev.URL()+"/metrics")
	require.Equal(t, http.StatusNotFound, status)
}
