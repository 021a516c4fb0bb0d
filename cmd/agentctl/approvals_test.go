package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl approvals against a dev fleet: a run of an agent whose ai()
// calls need a yes waits; `approvals ls` shows the call, `approve` lets
// it run (the turn again, on its recorded reply), `deny --reason` makes
// it throw what the script catches.
func TestApprovalsCLI(t *testing.T) {
	const greet = "Greeting.\n```javascript\nfunction run() { try { answer(ai(\"greet the user\")) } catch (e) { answer(\"refused: \" + e.message) } }\n```"
	// One reply per turn and ai() call, in the order they come: run A's
	// turn, its ai() once approved, run B's turn (denied: no ai()).
	model := llm.NewScripted(llm.Reply{Content: greet}, llm.Reply{Content: "hello there"}, llm.Reply{Content: greet})
	ctx, cancel := context.WithCancel(t.Context())
	dev, err := fleet.StartDev(ctx, fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", DataDir: t.TempDir(), Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler), ModelClient: model})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	_, err = dev.Store.AgentUpsert(ctx, store.AgentUpsertParams{Tenant: fleet.DevTenant, Name: "careful",
		Spec: agentfleet.AgentSpec{Approve: []string{"ai"}}})
	require.NoError(t, err)

	t.Setenv("AGENTFLEET_URL", dev.URL())
	t.Setenv("AGENTFLEET_TOKEN", dev.TenantKey)
	c := client.New(dev.URL(), dev.TenantKey)
	agentctl := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		require.Equal(t, want, run(ctx, args, &out, &errOut), "agentctl %v: %s", args, errOut.String())
		return out.String() + errOut.String()
	}
	// pending submits a run of careful and returns its approval's id,
	// as `approvals ls` shows it.
	pending := func() (string, string) {
		t.Helper()
		r, err := c.CreateRun(ctx, wire.RunCreateRequest{Agent: "careful", Message: "say hello"})
		require.NoError(t, err)
		var id string
		require.Eventually(t, func() bool {
			out := agentctl(exitOK, "approvals", "ls", "--run", r.ID)
			m := regexp.MustCompile(`(?m)^(\S+)\s+` + fleet.DevTenant + `\s+` + r.ID + `\s+1\s+ai\s+pending until`).FindStringSubmatch(out)
			if m != nil {
				id = m[1]
			}
			return m != nil
		}, 30*time.Second, 50*time.Millisecond)
		return r.ID, id
	}
	wait := func(id string) agentfleet.Run {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		r, err := c.Wait(wctx, id)
		require.NoError(t, err)
		return r
	}

	runA, a := pending()
	require.Contains(t, agentctl(exitOK, "approvals", "show", a), `"preview": "greet the user"`)
	require.Equal(t, exitUsage, run(ctx, []string{"approvals", "approve"}, &bytes.Buffer{}, &bytes.Buffer{}), "no ID")
	require.Contains(t, agentctl(exitFailed, "approvals", "approve", "--scope", "session", a), "has no session", "422 for a run without a session")
	require.Contains(t, agentctl(exitOK, "approvals", "approve", "--reason", "fine", a), "approval "+a+" approved (ai); run "+runA+" goes on")
	r := wait(runA)
	require.Equal(t, agentfleet.StatusCompleted, r.Status, r.Error)
	require.JSONEq(t, `"hello there"`, string(r.Answer))
	require.Contains(t, agentctl(exitFailed, "approvals", "deny", a), "approved already")

	runB, b := pending()
	require.Contains(t, agentctl(exitOK, "approvals", "deny", "--reason", "not now", b), "approval "+b+" denied")
	r = wait(runB)
	require.JSONEq(t, `"refused: ai was denied: not now"`, string(r.Answer))
	out := agentctl(exitOK, "approvals", "ls", "--status", "all")
	require.Regexp(t, b+`\s+`+fleet.DevTenant+`\s+`+runB+`\s+1\s+ai\s+denied \(not now\)`, out)
	require.Regexp(t, a+`\s+.*approved \(fine\)`, out)
	require.Zero(t, model.Remaining(), "the approved run's turn did not call the model again")
}
