package fleet_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/mcp/mcptest"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/wire"
)

// everythingServer runs @modelcontextprotocol/server-everything in
// streamable HTTP mode on loopback, behind a proxy that counts the
// tools/call requests naming each tool; it is stopped when t ends.
type everythingServer struct {
	URL   string
	mu    sync.Mutex
	calls map[string]int
}

func (e *everythingServer) called(tool string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[tool]
}

func startEverythingServer(t *testing.T) *everythingServer {
	t.Helper()
	endpoint, err := url.Parse(mcptest.StartEverything(t))
	require.NoError(t, err)

	e := &everythingServer{calls: map[string]int{}}
	target := &url.URL{Scheme: endpoint.Scheme, Host: endpoint.Host}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // the server answers in event streams
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var call struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &call) == nil && call.Method == "tools/call" {
				e.mu.Lock()
				e.calls[call.Params.Name]++
				e.mu.Unlock()
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	e.URL = srv.URL + "/mcp"
	return e
}

// everythingTurns calls echo and get-sum (by its alias and by bracket),
// then answers with what they returned.
func everythingTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	if assistantTurns(r) == 0 && strings.Contains(lastUser(r), "sum once") {
		return "Sum.\n```javascript\nfunction run() {\n" +
			"  return {sum: require('mcp:everything').getSum({a: 2, b: 40})};\n}\n```", usage, nil
	}
	if assistantTurns(r) == 0 {
		return "Use the tools.\n```javascript\nfunction run() {\n" +
			"  const e = require('mcp:everything');\n" +
			"  return {echo: e.echo({message: 'hello from the fleet'}), sum: e.getSum({a: 2, b: 40}), again: e['get-sum']({a: 1, b: 1})};\n}\n```", usage, nil
	}
	return "Done.\n```javascript\nfunction run(args) { answer(args) }\n```", usage, nil
}

func lastUser(r fakeserver.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == agentfleet.RoleUser {
			return r.Messages[i].Content
		}
	}
	return ""
}

// A run's script calls two tools of the real npm MCP server over
// streamable HTTP (loopback opened fleet-wide for the test) and answers
// with their results; the prompt declares the server's tools; each call
// is told as tool_call and tool_result events. With the rule
// mcp:everything.get-sum (a read-only tool, named exactly), the run
// parks before get-sum is called and, approved, calls it once per call
// the script makes.
func TestFleetMCPEverything(t *testing.T) {
	t.Parallel()
	ev := startEverythingServer(t)
	f := setupFleetWith(t, fleetOptions{responder: everythingTurns, workers: 1,
		sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow}}})
	servers := []any{map[string]any{"name": "everything", "url": ev.URL, "tools": []string{"echo", "get-sum"}}}
	agent := f.putAgent("tooled", map[string]any{"mcp": servers})
	require.Len(t, agent.MCP, 1)

	run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "tooled", Message: "use the tools"})
	require.NoError(t, err)
	done := f.wait(run.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `{"echo":"Echo: hello from the fleet","sum":"The sum of 2 and 40 is 42.","again":"The sum of 1 and 1 is 2."}`, string(done.Answer))
	require.Equal(t, 1, ev.called("echo"))
	require.Equal(t, 2, ev.called("get-sum"))
	var results []string
	for _, e := range f.events(run.ID) {
		if e.Type == agentfleet.EventToolResult {
			results = append(results, e.Summary)
		}
	}
	require.Contains(t, results, "mcp:everything.echo ok")
	require.Contains(t, results, "mcp:everything.get-sum ok")
	prompts := f.model.Received()
	require.NotEmpty(t, prompts)
	var first strings.Builder
	for _, m := range prompts[0].Messages {
		first.WriteString(m.Content)
	}
	require.Contains(t, first.String(), "require(m: 'mcp:everything')")
	require.Contains(t, first.String(), "getSum(args: {a: number; b: number})")

	// An approval rule on get-sum: the run parks before it is called,
	// and approved, calls it once.
	f.putAgent("gated", map[string]any{"mcp": servers, "approve": []string{"mcp:everything.get-sum"}})
	before := ev.called("get-sum")
	run, err = f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "gated", Message: "sum once"})
	require.NoError(t, err)
	a := f.pendingFor(run.ID)
	require.Equal(t, "mcp:everything.get-sum", a.Primitive)
	require.Contains(t, a.Preview, `"a":2`)
	require.Equal(t, before, ev.called("get-sum"), "nothing waiting for approval was called")
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{Reason: "fine"})
	require.NoError(t, err)
	done = f.wait(run.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `{"sum":"The sum of 2 and 40 is 42."}`, string(done.Answer))
	require.Equal(t, before+1, ev.called("get-sum"), "the approved call made once")
}
