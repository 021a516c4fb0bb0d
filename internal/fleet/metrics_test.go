package fleet_test

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
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

// Every metric the fleet exports passes Prometheus's own linter (names,
// units, help), the dispatcher's and a worker's, after a run has given
// the labelled ones a value.
func TestMetricsPassPromlint(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)
	f.requireCompletes("compute 3", `"result 7"`)

	status, body := get(t, f.dispatcher.MetricsURL())
	require.Equal(t, http.StatusOK, status)
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "dispatcher")
	require.Contains(t, body, `agentfleet_http_request_duration_seconds_count{code="2xx",method="POST",route="POST /v1/runs"} 1`,
		"requests are timed by route pattern")
	require.Contains(t, body, `route="GET /v1/runs/{id}"`, "the pattern, not the path with its id")

	names := map[string]bool{}
	for i, reg := range f.registries {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
		problems, err = promlint.NewWithMetricFamilies(mfs).Lint()
		require.NoError(t, err)
		require.Empty(t, problems, "worker %d", i)
	}
	for _, want := range []string{"gen_ai_client_operation_duration_seconds", "gen_ai_client_token_usage", "agentfleet_runs_ended_total", "agentfleet_run_queue_wait_seconds"} {
		require.True(t, names[want], "the workers export %s", want)
	}
}

// The Grafana dashboard under deploy/ is valid JSON and every metric its
// queries name is one the fleet declares (a renamed metric must take the
// dashboard with it).
func TestGrafanaDashboardNamesTheFleetsMetrics(t *testing.T) {
	declared := map[string]bool{}
	nameRE := regexp.MustCompile(`Name:\s*"((?:agentfleet|gen_ai)_[a-z_]+)"`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range nameRE.FindAllSubmatch(src, -1) {
			declared[string(m[1])] = true
		}
		return err
	})
	require.NoError(t, err)
	require.True(t, declared["agentfleet_runs_ended_total"], "the walk finds the declarations")

	raw, err := os.ReadFile("../../deploy/grafana/agentfleet.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	// Metric names, not the gen_ai_* label names.
	used := regexp.MustCompile(`\b(?:agentfleet|gen_ai_client)_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, name := range used.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && declared[trimmed] {
						base = trimmed
					}
				}
				require.True(t, declared[base], "panel %q queries %s, which no code declares", p.Title, name)
			}
		}
	}
	require.Greater(t, queries, 10)
}
