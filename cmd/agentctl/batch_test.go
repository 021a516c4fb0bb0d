package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl batch submit --wait admits a JSONL file, shows progress as
// plain lines when stdout is no terminal, writes the results in input
// order to --out, and exits with the worst status's code; ls, show,
// results and retry read and act on the batch.
func TestBatchSubmitWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := bustest.Connect(t, bustest.StartServer(t))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "cli.db")})
	require.NoError(t, err)
	defer st.Close()
	srv, err := api.New(api.Config{Store: st, Bus: b, AdminToken: "admin", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	sweep, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	batches := maintain.NewBatches(maintain.BatchesConfig{Store: st, Bus: b, Interval: 20 * time.Millisecond})
	go func() { defer close(swept); _ = batches.Run(sweep) }()
	defer func() { stopSweep(); <-swept }()
	tv, err := client.New(hs.URL, "admin").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_URL", hs.URL)
	t.Setenv("AGENTFLEET_TOKEN", tv.APIKey)
	batchPoll = 20 * time.Millisecond

	dir := t.TempDir()
	inputs := filepath.Join(dir, "inputs.jsonl")
	var lines strings.Builder
	for i := range 4 {
		fmt.Fprintf(&lines, `{"message":"task %d","custom_id":"c%d"}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(inputs, []byte(lines.String()), 0o600))
	agentctl := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	// A worker's part, through the store: the runs end as they are
	// admitted, one of them failed.
	go func() {
		for ctx.Err() == nil {
			page, err := st.RunList(ctx, store.RunListParams{Tenant: "acme", Status: []agentfleet.RunStatus{agentfleet.StatusQueued}})
			if err == nil {
				for _, r := range page.Runs {
					to := agentfleet.StatusCompleted
					if r.Message == "task 2" {
						to = agentfleet.StatusFailed
					}
					_, _ = st.RunTransition(ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusRunning})
					_, _ = st.RunTransition(ctx, store.RunTransitionParams{ID: r.ID, To: to, Answer: json.RawMessage(`"ok"`), Error: "boom"})
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr := agentctl("batch", "submit", "--max-concurrent", "2", "--wait", "--out", out, inputs)
	require.Equal(t, exitFailed, code, "one run failed: %s", stderr)
	require.Empty(t, stdout, "the results went to --out")
	require.Contains(t, stderr, "4/4 done, 1 failed")
	require.Contains(t, stderr, "ETA 0s")
	require.Contains(t, stderr, "1 of 4 runs failed")
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	var res []wire.BatchResult
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r wire.BatchResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		res = append(res, r)
	}
	require.Len(t, res, 4)
	for i, r := range res {
		require.Equal(t, i, r.Index)
		require.Equal(t, fmt.Sprintf("c%d", i), r.CustomID)
	}
	require.Equal(t, agentfleet.StatusFailed, res[2].Status)

	code, stdout, _ = agentctl("batch", "ls")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "completed")
	id := strings.Fields(strings.Split(stdout, "\n")[1])[0]
	code, stdout, _ = agentctl("batch", "show", id)
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "completed 3, failed 1")
	code, stdout, _ = agentctl("batch", "results", "--after", "2", id)
	require.Equal(t, exitOK, code)
	require.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
	require.Contains(t, stdout, `"index":3`)

	// Retrying submits the failed input; its run ends (completed) too.
	code, stdout, stderr = agentctl("batch", "retry", id)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "1 inputs")
	code, _, stderr = agentctl("batch", "submit", "nope.jsonl")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "nope.jsonl")
	code, _, _ = agentctl("batch", "submit", "--out", out, inputs)
	require.Equal(t, exitUsage, code)
}
