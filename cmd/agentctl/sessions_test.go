package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl sessions against a dev fleet: ls lists the sessions newest
// updated first (filtered by agent), show prints one as a conversation
// (or JSON), rm deletes it once its runs have ended and says why not
// while one waits.
func TestSessionsCLI(t *testing.T) {
	model := answers("done", "again")
	ask := "Asking.\n```javascript\nfunction run() { answer(ai(\"may I?\")) }\n```"
	model.Push(llmReply(ask))
	ctx, c, agentctl := devCLI(t, model)
	_, err := c.PutAgent(ctx, "careful", wire.AgentRequest{AgentSpec: agentfleet.AgentSpec{Approve: []string{"ai"}}})
	require.NoError(t, err)
	wait := func(id string) agentfleet.Run {
		t.Helper()
		r, err := c.Wait(ctx, id)
		require.NoError(t, err)
		return r
	}
	r1, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: "first", SessionID: "s-one"})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, wait(r1.ID).Status)
	r2, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: "second", SessionID: "s-two"})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, wait(r2.ID).Status)
	parked, err := c.CreateRun(ctx, wire.RunCreateRequest{Agent: "careful", Message: "ask first", SessionID: "s-one"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := c.GetRun(ctx, parked.ID)
		return err == nil && r.Status == agentfleet.StatusWaitingApproval
	}, 30*time.Second, 20*time.Millisecond)

	code, stdout, stderr := agentctl("sessions", "ls")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^ID\s+AGENT\s+RUNS\s+LAST RUN\s+STATUS\s+TOKENS\s+UPDATED$`, stdout)
	require.Regexp(t, `(?m)^s-one\s+careful\s+2\s+`+parked.ID+`\s+waiting_approval\s+\d+\s`, stdout)
	require.Regexp(t, `(?m)^s-two\s+default\s+1\s+`+r2.ID+`\s+completed\s+\d+\s`, stdout)
	require.Less(t, strings.Index(stdout, "s-one"), strings.Index(stdout, "s-two"), "newest updated first")
	code, stdout, _ = agentctl("sessions", "ls", "--agent", "default")
	require.Equal(t, exitOK, code)
	require.NotContains(t, stdout, "s-one", "its latest run is careful's")
	require.Contains(t, stdout, "s-two")
	code, stdout, stderr = agentctl("sessions", "ls", "--limit", "1")
	require.Equal(t, exitOK, code)
	require.Contains(t, stderr, "more: agentctl sessions ls --cursor ")

	code, stdout, _ = agentctl("sessions", "show", "s-one")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `(?s)^session s-one  agent careful  2 runs .*── run `+r1.ID+`  completed .*> first\n  done\n.*── run `+parked.ID+`  waiting_approval .*> ask first\n  \(waiting_approval\)\n`, stdout)
	code, stdout, _ = agentctl("sessions", "show", "--json", "s-two")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, `"checkpoint": null`)
	require.Contains(t, stdout, `"message": "second"`)

	code, _, stderr = agentctl("sessions", "rm", "s-one")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "session s-one has run "+parked.ID+" waiting_approval")
	require.Contains(t, stderr, "cancel it")
	_, err = c.CancelRun(ctx, parked.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := c.GetRun(ctx, parked.ID)
		return err == nil && r.Status.Terminal()
	}, 30*time.Second, 20*time.Millisecond)
	code, stdout, stderr = agentctl("sessions", "rm", "s-one")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "session s-one deleted (2 runs)\n", stdout)
	_, err = c.GetRun(ctx, r1.ID)
	require.True(t, client.IsNotFound(err), "got %v", err)
	code, _, stderr = agentctl("sessions", "show", "s-one")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, `no session "s-one"`)

	code, _, stderr = agentctl("sessions", "rm")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "sessions rm takes one SESSION id")
	code, _, _ = agentctl("sessions", "nope")
	require.Equal(t, exitUsage, code)
}
