package fleet_test

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/wire"
)

// toggleTool is server-everything's tool without readOnlyHint: its calls
// are journaled.
const toggleTool = "toggle-simulated-logging"

// toggleTurns calls the toggle tool, then holds at the target's /hold
// before the turn can commit; then answers with what it saw.
func toggleTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	if assistantTurns(r) == 0 {
		return "Toggle.\n```javascript\nfunction run(args) {\n" +
			"  const said = require('mcp:everything')['" + toggleTool + "']({});\n" +
			"  const held = require('http').post(args.target + '/hold', {}).json().serial;\n" +
			"  return {said, held};\n}\n```", usage, nil
	}
	return "Report.\n```javascript\nfunction run(args) { answer(args) }\n```", usage, nil
}

// A run whose agent must have the real npm MCP server's non-read-only
// tool approved parks before calling it; approved, the worker calls it
// and is SIGKILLed before the turn commits. The turn runs again on
// another worker process, which replays the recorded tool result (the
// first worker's MCP session is named in it) instead of calling the tool
// again: the server sees one call.
func TestMultiProcessMCPApprovedToolCalledOnceAcrossWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries")
	}
	ev := startEverythingServer(t)
	target, srv := startEffectTarget(t)
	f := startWorkerFleet(t, toggleTurns)
	ctx := f.ctx
	body, err := json.Marshal(map[string]any{
		"mcp":     []any{map[string]any{"name": "everything", "url": ev.URL, "tools": []string{toggleTool}}},
		"approve": []string{"mcp:everything." + toggleTool},
	})
	require.NoError(t, err)
	_, err = f.tenant.PutAgentJSON(ctx, "toggler", body)
	require.NoError(t, err)
	run, err := f.tenant.CreateRun(ctx, wire.RunCreateRequest{Agent: "toggler", Message: "toggle",
		Context: json.RawMessage(`{"target":"` + srv.URL + `"}`)})
	require.NoError(t, err)

	var pending wire.ApprovalView
	require.Eventually(t, func() bool {
		page, err := f.tenant.ListApprovals(ctx, client.ListApprovalsParams{Status: "pending", RunID: run.ID})
		require.NoError(t, err)
		if len(page.Approvals) == 0 {
			return false
		}
		pending = page.Approvals[0]
		return true
	}, 60*time.Second, 50*time.Millisecond, "the run never asked for approval")
	require.Equal(t, "mcp:everything."+toggleTool, pending.Primitive)
	require.Zero(t, ev.called(toggleTool), "nothing waiting for approval was called")
	_, err = f.tenant.Approve(ctx, pending.ID, wire.ApprovalDecision{Reason: "go"})
	require.NoError(t, err)

	select {
	case <-target.held: // the tool called and recorded, the turn not committed
	case <-time.After(60 * time.Second):
		t.Fatal("the script never reached /hold")
	}
	require.Equal(t, 1, ev.called(toggleTool))
	require.NoError(t, f.first.cmd.Process.Signal(syscall.SIGKILL))
	<-f.first.done
	f.startWorker("worker1")

	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done, err := f.tenant.Wait(waitCtx, run.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	var answer struct {
		Said string `json:"said"`
		Held int    `json:"held"`
	}
	require.NoError(t, json.Unmarshal(done.Answer, &answer))
	require.True(t, strings.HasPrefix(answer.Said, "Started simulated"), "the first call's result, replayed: %q", answer.Said)
	require.Equal(t, 2, answer.Held, "the call in flight at the kill was made again")
	require.Equal(t, 1, ev.called(toggleTool), "the approved tool was called once across the kill")

	trace, err := f.tenant.RunSteps(ctx, run.ID, 1)
	require.NoError(t, err)
	var calls []string
	for _, j := range trace.Journal {
		calls = append(calls, strings.TrimSpace(j.Primitive+" "+j.Method))
	}
	require.Equal(t, []string{"mcp:everything." + toggleTool, "http POST"}, calls)
}
