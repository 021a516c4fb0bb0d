package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl against a dev fleet: dev mode made a secrets key, so a
// trigger can be created at once; `triggers send` signs like GitHub and
// its delivery's run completes on the demo model; a repeat of the same
// delivery id is the same run; the log shows both.
func TestTriggersCLI(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	dev, err := fleet.StartDev(ctx, fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", DataDir: dir, Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	st, err := os.Stat(filepath.Join(dir, "secrets-key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	t.Setenv("AGENTFLEET_URL", dev.URL())
	t.Setenv("AGENTFLEET_TOKEN", dev.TenantKey)
	agentctl := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut)
		require.Equal(t, exitOK, code, "agentctl %v: %s", args, errOut.String())
		return out.String(), errOut.String()
	}

	out, stderr := agentctl("triggers", "create", "--scheme", "github", "--events", "issues.opened",
		"--message", "List the prime numbers below 50", "primes")
	var tv wire.TriggerView
	require.NoError(t, json.Unmarshal([]byte(out), &tv))
	secret := regexp.MustCompile(`\(shown once\): (\S+)`).FindStringSubmatch(stderr)
	require.NotNil(t, secret, stderr)
	require.Contains(t, stderr, dev.URL()+"/v1/hooks/"+tv.ID)

	payload := filepath.Join(dir, "issue.json")
	require.NoError(t, os.WriteFile(payload, []byte(`{"action":"opened","issue":{"number":1}}`), 0o600))
	t.Setenv("AGENTFLEET_TRIGGER_SECRET", secret[1])
	out, stderr = agentctl("triggers", "send", tv.ID, "--event", "issues", "--file", payload, "--delivery", "cli-1")
	require.Contains(t, stderr, "HTTP 202")
	var ans wire.HookAnswer
	require.NoError(t, json.Unmarshal([]byte(out), &ans))
	require.Equal(t, "cli-1", ans.Delivery)

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	r, err := client.New(dev.URL(), dev.TenantKey).Wait(wctx, ans.RunID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, r.Status, r.Error)

	out, stderr = agentctl("triggers", "send", tv.ID, "--event", "issues", "--file", payload, "--delivery", "cli-1", "--scheme", "github")
	require.Contains(t, stderr, "HTTP 200")
	require.Contains(t, out, ans.RunID)

	out, _ = agentctl("triggers", "deliveries", tv.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `duplicate\s+issues.opened\s+cli-1\s+`+ans.RunID, lines[1])
	require.Regexp(t, `accepted\s+issues.opened\s+cli-1\s+`+ans.RunID, lines[2])

	out, _ = agentctl("triggers", "ls")
	require.Contains(t, out, tv.ID)
	var errOut bytes.Buffer
	require.Equal(t, exitFailed, run(ctx, []string{"triggers", "send", tv.ID, "--event", "issues", "--file", payload, "--secret", "not-the-secret-at-all"}, &bytes.Buffer{}, &errOut))
	require.Contains(t, errOut.String(), "X-Hub-Signature-256")
	require.Equal(t, exitUsage, run(ctx, []string{"triggers", "send", tv.ID, "--file", payload, "--secret", ""}, &bytes.Buffer{}, &bytes.Buffer{}))
	agentctl("triggers", "rm", tv.ID)

	// hmac: send signs the id and the time with the body, as the intake
	// verifies; the same delivery again is its first run.
	out, stderr = agentctl("triggers", "create", "--scheme", "hmac", "--message", "List the prime numbers below 20", "generic")
	var hv wire.TriggerView
	require.NoError(t, json.Unmarshal([]byte(out), &hv))
	hsecret := regexp.MustCompile(`\(shown once\): (\S+)`).FindStringSubmatch(stderr)
	require.NotNil(t, hsecret, stderr)
	out, stderr = agentctl("triggers", "send", hv.ID, "--file", payload, "--delivery", "h-1", "--secret", hsecret[1])
	require.Contains(t, stderr, "HTTP 202")
	require.NoError(t, json.Unmarshal([]byte(out), &ans))
	_, stderr = agentctl("triggers", "send", hv.ID, "--file", payload, "--delivery", "h-1", "--secret", hsecret[1])
	require.Contains(t, stderr, "HTTP 200")
	out, _ = agentctl("triggers", "test", hv.ID)
	require.Contains(t, out, `"run_id"`, "the server signs a test delivery the same way")
}
