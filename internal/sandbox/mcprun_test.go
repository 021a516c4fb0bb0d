package sandbox

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// mcpTestServer is an in-process MCP server (the SDK's) on a real HTTP
// listener: get-sum (side effects: counted), weather (readOnlyHint,
// structured content), fails (isError).
type mcpTestServer struct {
	URL   string
	sums  atomic.Int32
	mu    sync.Mutex
	heads []string
	roots *x509.CertPool // of the TLS server
}

func newMCPTestServer(t *testing.T) *mcpTestServer { return newMCPServerTLS(t, false) }

func newMCPServerTLS(t *testing.T, tls bool) *mcpTestServer {
	t.Helper()
	ts := &mcpTestServer{}
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "get-sum", Description: "Adds a and b",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ts.sums.Add(1)
			var in struct{ A, B float64 }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("The sum of %g and %g is %g.", in.A, in.B, in.A+in.B)}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "weather", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: `{"temp":21}`}}, StructuredContent: map[string]any{"temp": 21}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "fails", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such repository"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "hidden", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.heads = append(ts.heads, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	if tls {
		srv.StartTLS()
		ts.roots = x509.NewCertPool()
		ts.roots.AddCert(srv.Certificate())
	} else {
		srv.Start()
	}
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	ts.URL = srv.URL + "/mcp"
	return ts
}

func mcpPool(t *testing.T) *Pool {
	t.Helper()
	p, err := New(Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// A script calls an MCP server's tools synchronously: text back, or the
// structured content; camelCase aliases; isError throws its text; a tool
// the allow-list leaves out is not there. The declarations list the
// allowed tools.
func TestMCPToolsFromAScript(t *testing.T) {
	t.Parallel()
	ts := newMCPTestServer(t)
	p := mcpPool(t)
	servers := []agentfleet.MCPServer{{Name: "calc", URL: ts.URL, Tools: []string{"get-sum", "weather", "fails"}}}
	var events []agentfleet.Event
	res, err := p.Execute(context.Background(), agentfleet.ExecRequest{
		MCP: servers, ToolEvent: func(e agentfleet.Event) { events = append(events, e) },
		Script: `function run() {
  const c = require('mcp:calc');
  let err = "";
  try { c.fails({}); } catch (e) { err = String(e.message); }
  return {sum: c['get-sum']({a: 2, b: 3}), alias: c.getSum({a: 1, b: 1}), w: c.weather(), err, hidden: typeof c.hidden};
}`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	require.JSONEq(t, `{"sum":"The sum of 2 and 3 is 5.","alias":"The sum of 1 and 1 is 2.","w":{"temp":21},"err":"no such repository","hidden":"undefined"}`, string(res.Return))
	require.EqualValues(t, 2, ts.sums.Load())
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Type)+" "+e.Summary)
	}
	require.Contains(t, kinds, string(agentfleet.EventToolCall)+" mcp:calc.get-sum")
	require.Contains(t, kinds, string(agentfleet.EventToolResult)+" mcp:calc.fails failed")

	decl := p.MCPDeclarations(context.Background(), agentfleet.ExecRequest{MCP: servers})
	require.Contains(t, decl, "get-sum")
	require.Contains(t, decl, "weather")
	require.NotContains(t, decl, "hidden")

	// A server that does not answer is one line in the declarations, and
	// a call of it throws an error the script can catch.
	down := []agentfleet.MCPServer{{Name: "down", URL: "http://127.0.0.1:1/mcp"}}
	require.Contains(t, p.MCPDeclarations(context.Background(), agentfleet.ExecRequest{MCP: down}), "require('mcp:down'): its tools could not be listed")
	res, err = p.Execute(context.Background(), agentfleet.ExecRequest{MCP: down,
		Script: `function run() { try { require('mcp:down'); return "no"; } catch (e) { return String(e.message); } }`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	require.Contains(t, string(res.Return), "mcp:down")
}

// A tool without readOnlyHint is journaled: executed again, the turn gets
// the recorded result and the tool is not called twice. A read-only tool
// is not journaled.
func TestMCPToolJournaled(t *testing.T) {
	t.Parallel()
	ts := newMCPTestServer(t)
	p := mcpPool(t)
	j := newMemJournal()
	req := agentfleet.ExecRequest{RunID: "run-1", Turn: 1, Journal: j,
		MCP:    []agentfleet.MCPServer{{Name: "calc", URL: ts.URL}},
		Script: `function run() { const c = require('mcp:calc'); c.weather(); return c.getSum({a: 4, b: 5}); }`}
	for range 2 {
		res, err := p.Execute(context.Background(), req)
		require.NoError(t, err)
		require.Nil(t, res.Err, "%v", res.Err)
		require.JSONEq(t, `"The sum of 4 and 5 is 9."`, string(res.Return))
	}
	require.EqualValues(t, 1, ts.sums.Load())
	require.Len(t, j.entries, 1)
	require.Equal(t, "mcp:calc.get-sum", j.entries[0].Primitive)
}

// Approvals: mcp:<server>.* covers the tools without readOnlyHint; a
// read-only tool asks only when a rule names it exactly. A pending
// approval parks the turn before the tool is called.
func TestMCPApprovals(t *testing.T) {
	t.Parallel()
	ts := newMCPTestServer(t)
	p := mcpPool(t)
	servers := []agentfleet.MCPServer{{Name: "calc", URL: ts.URL}}
	a := &approvals{state: agentfleet.ApprovalPending}
	res, err := p.Execute(context.Background(), agentfleet.ExecRequest{RunID: "r", Turn: 1, MCP: servers,
		Approve: []string{"mcp:calc.*"}, Approval: a.fn,
		Script: `function run() { const c = require('mcp:calc'); const w = c.weather(); return c.getSum({a: 1, b: 2}); }`})
	require.NoError(t, err)
	require.NotNil(t, res.Approval, "parked")
	require.Equal(t, "mcp:calc.get-sum", res.Approval.Primitive)
	require.Contains(t, res.Approval.Preview, `"a":1`)
	require.Len(t, a.asked, 1, "the read-only weather asked nothing")
	require.Zero(t, ts.sums.Load())

	a = &approvals{state: agentfleet.ApprovalApproved}
	res, err = p.Execute(context.Background(), agentfleet.ExecRequest{RunID: "r", Turn: 1, MCP: servers,
		Approve: []string{"mcp:calc.weather"}, Approval: a.fn,
		Script: `function run() { const c = require('mcp:calc'); c.getSum({a: 1, b: 2}); return c.weather(); }`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	require.Len(t, a.asked, 1)
	require.Equal(t, "mcp:calc.weather", a.asked[0].Primitive)

	require.NoError(t, CheckApproveRules([]string{"mcp:calc.get-sum", "mcp:calc.*"}))
	require.ErrorContains(t, CheckApproveRules([]string{"mcp:calc"}), "mcp:<server>.<tool>")
}

// The server's secret goes only over HTTPS to the secret's hosts: to a
// plain-http loopback server it is not sent.
func TestMCPSecretNotSentOverPlainHTTP(t *testing.T) {
	t.Parallel()
	ts := newMCPTestServer(t)
	p := mcpPool(t)
	res, err := p.Execute(context.Background(), agentfleet.ExecRequest{
		Credentials: []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "tok", Hosts: []string{"127.0.0.1"}}, Value: "s3cret-value-123"}},
		MCP:         []agentfleet.MCPServer{{Name: "calc", URL: ts.URL, Secret: "tok"}},
		Script:      `function run() { return require('mcp:calc').weather(); }`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	require.NotEmpty(t, ts.heads)
	require.NotContains(t, strings.Join(ts.heads, ","), "s3cret")
}

// Over HTTPS to one of the secret's hosts, every request to the server
// carries the secret in its header; the script never sees it.
func TestMCPSecretSentOverHTTPS(t *testing.T) {
	t.Parallel()
	ts := newMCPServerTLS(t, true)
	p, err := New(Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback, RootCAs: ts.roots}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	res, err := p.Execute(context.Background(), agentfleet.ExecRequest{
		Credentials: []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "tok", Hosts: []string{"127.0.0.1"}}, Value: "s3cret-value-123"}},
		MCP:         []agentfleet.MCPServer{{Name: "calc", URL: ts.URL, Secret: "tok"}},
		Script:      `function run() { return require('mcp:calc').getSum({a: 1, b: 2}); }`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	require.JSONEq(t, `"The sum of 1 and 2 is 3."`, string(res.Return))
	ts.mu.Lock()
	defer ts.mu.Unlock()
	require.NotEmpty(t, ts.heads)
	for _, h := range ts.heads {
		require.Equal(t, "Bearer s3cret-value-123", h)
	}
}

// The Policy sees a tool call as mcp:<server>.<tool>: denied, the script
// gets a PolicyError it can catch, and the tool is not called.
func TestMCPPolicyDenies(t *testing.T) {
	t.Parallel()
	ts := newMCPTestServer(t)
	var seen []string
	p, err := New(Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}, Policy: PolicyFunc(func(_ context.Context, c Call) (Decision, string) {
		seen = append(seen, c.Primitive)
		if c.Primitive == "mcp:calc.get-sum" {
			return Deny, "no sums today"
		}
		return Allow, ""
	})})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	var events []string
	res, err := p.Execute(context.Background(), agentfleet.ExecRequest{
		MCP:       []agentfleet.MCPServer{{Name: "calc", URL: ts.URL}},
		ToolEvent: func(e agentfleet.Event) { events = append(events, string(e.Type)+" "+e.Summary) },
		Script: `function run() {
  const c = require('mcp:calc');
  try { c.getSum({a: 1, b: 2}); return "called"; } catch (e) { return e.name + ": " + e.message + " / " + c.weather().temp; }
}`})
	require.NoError(t, err)
	require.Nil(t, res.Err, "%v", res.Err)
	require.JSONEq(t, `"PolicyError: mcp:calc.get-sum denied by policy: no sums today / 21"`, string(res.Return))
	require.Zero(t, ts.sums.Load())
	require.Equal(t, []string{"mcp:calc.get-sum", "mcp:calc.weather"}, seen)
	require.Equal(t, []string{"tool_call mcp:calc.get-sum", "tool_result mcp:calc.get-sum denied",
		"tool_call mcp:calc.weather", "tool_result mcp:calc.weather ok"}, events, "the refused call is told too")
}
