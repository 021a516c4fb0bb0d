// The tools scenario: what an MCP server costs an agent. A local server
// (the official SDK, streamable HTTP on loopback) with ToolsOnServer
// tools; the prompt of an agent without it, with ToolsDeclared of its
// tools (a declaration line each) and with all of them (a catalog line);
// and the latency of one tool call made by a script through the fleet
// against the same call made directly by an MCP client, read at the
// server as the time between one call's arrival and the next's.

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/mcp"
	"github.com/agentfleet/agentfleet/wire"
)

// Shape and target of the tools scenario.
const (
	// ToolsOnServer is the bench server's tools; ToolsDeclared how many
	// of them an agent may allow and still have one declaration line
	// each (past it the prompt has a catalog line and help()).
	ToolsOnServer = 30
	ToolsDeclared = 12
	// ToolCallAddedTarget bounds what the fleet adds to a tool call at
	// p50 over a direct call to the same server.
	ToolCallAddedTarget = 2 * time.Millisecond
	// toolsServer is the agents' name of the bench server; the measured
	// tools are pingTool (readOnlyHint) and noteTool (journaled).
	toolsServer = "bench"
	pingTool    = "ping"
	noteTool    = "note"
)

// ToolsFigures: the prompt cost of a server's tools and the latency of a
// call through the fleet.
type ToolsFigures struct {
	ServerTools int `json:"server_tools"`
	// DeclCharsPerTool is the mean characters of a tool's declaration
	// line over the server's tools (DeclCharsMin/Max the range).
	DeclCharsPerTool float64 `json:"decl_chars_per_tool"`
	DeclCharsMin     int     `json:"decl_chars_min"`
	DeclCharsMax     int     `json:"decl_chars_max"`
	// PromptNoTools, PromptDeclared and PromptCatalog are the first
	// prompt's characters of one run's first call: an agent without the
	// server, one allowing ToolsDeclared of its tools, one allowing all.
	PromptNoTools  int `json:"prompt_no_tools"`
	PromptDeclared int `json:"prompt_declared"`
	PromptCatalog  int `json:"prompt_catalog"`
	// Calls is the calls of each measured series; Direct a client's
	// calls of ping, FleetReadOnly a script's calls of ping (not
	// journaled), FleetJournaled a script's calls of note (each
	// recorded in the journal before the script goes on). Each sample is
	// the time between two consecutive calls' arrival at the server.
	Calls          int     `json:"calls"`
	Direct         Summary `json:"direct"`
	FleetReadOnly  Summary `json:"fleet_read_only"`
	FleetJournaled Summary `json:"fleet_journaled"`
	// AddedP50 and AddedP50Journaled: the fleet's p50 minus the direct
	// p50; Target their bound.
	AddedP50          Duration `json:"added_p50"`
	AddedP50Journaled Duration `json:"added_p50_journaled"`
	Target            Duration `json:"target"`
}

// toolServer is the bench's MCP server; it records when each call of
// each tool arrived.
type toolServer struct {
	mcp *sdk.Server
	srv *http.Server
	url string

	mu       sync.Mutex
	arrivals map[string][]time.Time
}

// startToolServer serves ToolsOnServer tools: ping (read-only), note,
// and tools shaped like a tracker's (search, get, create, update ...)
// whose declarations the prompt carries.
func startToolServer() (*toolServer, error) {
	ts := &toolServer{arrivals: map[string][]time.Time{}}
	s := sdk.NewServer(&sdk.Implementation{Name: "agentctl-bench", Version: "1"}, nil)
	add := func(name, desc, schema string, readOnly bool) {
		t := &sdk.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(schema)}
		if readOnly {
			t.Annotations = &sdk.ToolAnnotations{ReadOnlyHint: true}
		}
		s.AddTool(t, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			now := time.Now()
			ts.mu.Lock()
			ts.arrivals[name] = append(ts.arrivals[name], now)
			ts.mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}},
				StructuredContent: map[string]any{"ok": true}}, nil
		})
	}
	add(pingTool, "Answers ok at once.", `{"type":"object","properties":{"i":{"type":"integer"}}}`, true)
	add(noteTool, "Records a note.", `{"type":"object","properties":{"i":{"type":"integer"},"text":{"type":"string"}},"required":["i"]}`, false)
	nouns := []string{"issue", "project", "comment", "label", "user", "team", "cycle"}
	verbs := []struct {
		verb, desc, schema string
		readOnly           bool
	}{
		{"search", "Searches %ss by a query, newest first.", `{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":100}},"required":["query"]}`, true},
		{"get", "Gets one %s by its id.", `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`, true},
		{"create", "Creates a %s.", `{"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"},"labels":{"type":"array","items":{"type":"string"}}},"required":["title"]}`, false},
		{"update", "Updates a %s's fields.", `{"type":"object","properties":{"id":{"type":"string"},"title":{"type":"string"},"state":{"enum":["open","closed"]}},"required":["id"]}`, false},
	}
	for n := 0; n < ToolsOnServer-2; n++ {
		v, noun := verbs[n%len(verbs)], nouns[n/len(verbs)]
		add(v.verb+"_"+noun, fmt.Sprintf(v.desc, noun), v.schema, v.readOnly)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ts.mcp, ts.url = s, "http://"+l.Addr().String()+"/mcp"
	ts.srv = &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ts.srv.Serve(l) }()
	return ts, nil
}

// close stops the listener and ends the sessions its clients opened
// (the fleet's included, which outlive the listener otherwise).
func (ts *toolServer) close() {
	_ = ts.srv.Close()
	for ss := range ts.mcp.Sessions() {
		_ = ss.Close()
	}
}

// take returns and forgets the arrivals of tool's calls.
func (ts *toolServer) take(tool string) []time.Time {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	a := ts.arrivals[tool]
	delete(ts.arrivals, tool)
	return a
}

// gaps are the times between consecutive arrivals.
func gaps(at []time.Time) []time.Duration {
	var ds []time.Duration
	for i := 1; i < len(at); i++ {
		ds = append(ds, at[i].Sub(at[i-1]))
	}
	return ds
}

// toolsMessage asks the bench model for a script that calls tool n times.
func toolsMessage(tag, tool string, n int) string {
	return fmt.Sprintf("bench-tools %s call %s %d times", tag, tool, n)
}

var toolsRE = regexp.MustCompile(`bench-tools (\S+) call (\S+) (\d+) times`)

// toolsReply is the model's reply to a tools message: a script calling
// the tool n times and answering with the count.
func toolsReply(msgs []agentfleet.ChatMessage) (string, bool) {
	for _, m := range msgs {
		if m.Role != agentfleet.RoleUser {
			continue
		}
		ms := toolsRE.FindStringSubmatch(m.Content)
		if ms == nil {
			continue
		}
		n, _ := strconv.Atoi(ms[3])
		if n == 0 {
			return "Nothing to call.\n```javascript\nfunction run() { answer('called 0') }\n```", true
		}
		return fmt.Sprintf("Call it.\n```javascript\nfunction run() {\n  const s = require('mcp:%s');\n"+
			"  for (let i = 0; i < %d; i++) s[%q]({i: i});\n  answer('called %d');\n}\n```", toolsServer, n, ms[2], n), true
	}
	return "", false
}

// tools measures the prompts, then the three call series.
func (e *env) tools(ctx context.Context) error {
	ts, err := startToolServer()
	if err != nil {
		return fmt.Errorf("start the bench MCP server: %w", err)
	}
	defer ts.close()
	f := &ToolsFigures{Calls: e.cfg.Runs, Target: Duration(ToolCallAddedTarget)}
	e.rep.Figures.Tools = f

	// The declarations, as the prompt writes them.
	c, err := mcp.Dial(ctx, mcp.Config{Name: toolsServer, URL: ts.url})
	if err != nil {
		return fmt.Errorf("dial the bench MCP server: %w", err)
	}
	defer func() { _ = c.Close() }()
	list, err := c.ListTools(ctx)
	if err != nil {
		return fmt.Errorf("list the bench server's tools: %w", err)
	}
	f.ServerTools = len(list.Tools)
	total := 0
	for i, tool := range list.Tools {
		n := len(mcp.DeclLine(list.Tools, tool))
		total += n
		if i == 0 || n < f.DeclCharsMin {
			f.DeclCharsMin = n
		}
		f.DeclCharsMax = max(f.DeclCharsMax, n)
	}
	if f.ServerTools > 0 {
		f.DeclCharsPerTool = float64(total) / float64(f.ServerTools)
	}

	t, err := e.tenant(ctx, "tools")
	if err != nil {
		return err
	}
	var declared []string
	for _, tool := range list.Tools[:min(ToolsDeclared, len(list.Tools))] {
		declared = append(declared, tool.Name)
	}
	agents := []struct {
		name  string
		spec  agentfleet.AgentSpec
		chars *int
	}{
		{"bench-no-tools", agentfleet.AgentSpec{}, &f.PromptNoTools},
		{"bench-tools-declared", agentfleet.AgentSpec{MCP: []agentfleet.MCPServer{{Name: toolsServer, URL: ts.url, Tools: declared}}}, &f.PromptDeclared},
		{"bench-tools", agentfleet.AgentSpec{MCP: []agentfleet.MCPServer{{Name: toolsServer, URL: ts.url}}}, &f.PromptCatalog},
	}
	e.model.setRecording(true)
	defer e.model.setRecording(false)
	for _, a := range agents {
		if _, err := t.c.PutAgent(ctx, a.name, wire.AgentRequest{AgentSpec: a.spec}); err != nil {
			return fmt.Errorf("define agent %s: %w", a.name, err)
		}
		e.model.takeRecorded()
		if err := e.toolRun(ctx, t, a.name, toolsMessage(t.tag, pingTool, 0)); err != nil {
			return err
		}
		if calls := e.model.takeRecorded(); len(calls) > 0 {
			*a.chars = promptChars(calls[0].messages)
		}
	}

	// A client calling ping directly, then scripts calling ping and note.
	for range min(e.cfg.Runs/10, 50) { // warm the connection
		if _, err := c.Call(ctx, pingTool, json.RawMessage(`{"i":0}`)); err != nil {
			return fmt.Errorf("call ping directly: %w", err)
		}
	}
	ts.take(pingTool)
	for i := range e.cfg.Runs {
		if _, err := c.Call(ctx, pingTool, json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`)); err != nil {
			return fmt.Errorf("call ping directly: %w", err)
		}
	}
	f.Direct = summarize(gaps(ts.take(pingTool)))
	for _, s := range []struct {
		tool string
		into *Summary
	}{{pingTool, &f.FleetReadOnly}, {noteTool, &f.FleetJournaled}} {
		e.say("a script calls %s %d times", s.tool, e.cfg.Runs)
		if err := e.toolRun(ctx, t, "bench-tools", toolsMessage(t.tag, s.tool, e.cfg.Runs)); err != nil {
			return err
		}
		*s.into = summarize(gaps(ts.take(s.tool)))
	}
	f.AddedP50 = f.FleetReadOnly.P50 - f.Direct.P50
	f.AddedP50Journaled = f.FleetJournaled.P50 - f.Direct.P50

	e.rep.check("prompt: catalog past the declared tools", f.PromptCatalog > f.PromptNoTools && f.PromptCatalog < f.PromptDeclared, false,
		"no tools %d chars, %d declared %d, all %d as a catalog line %d", f.PromptNoTools, ToolsDeclared, f.PromptDeclared, f.ServerTools, f.PromptCatalog)
	e.rep.check("calls measured", f.Direct.N == e.cfg.Runs-1 && f.FleetReadOnly.N == e.cfg.Runs-1 && f.FleetJournaled.N == e.cfg.Runs-1, false,
		"%d direct, %d read-only and %d journaled gaps of %d calls each", f.Direct.N, f.FleetReadOnly.N, f.FleetJournaled.N, e.cfg.Runs)
	e.rep.check("tool call overhead", f.AddedP50 <= f.Target, true,
		"the fleet adds %s at p50 to a read-only call (%s journaled), target %s", f.AddedP50, f.AddedP50Journaled, f.Target)
	e.rep.note("a call's latency is the time from its arrival at the server to the next call's, calls made one after another: a direct call's is the MCP client's round trip; a script's adds the sandbox's host call and, for note, the journal's record")
	return nil
}

// toolRun runs one tools message on agent and checks it completed.
func (e *env) toolRun(ctx context.Context, t *tenant, agent, msg string) error {
	counts := &e.rep.Figures.Runs
	s, err := e.submitRequest(ctx, t, -1, wire.RunCreateRequest{Agent: agent, Message: msg, MaxTurns: 2})
	if err != nil {
		counts.SubmitErrors++
		return fmt.Errorf("submit a run of %s: %w", agent, err)
	}
	counts.Submitted++
	run, err := e.waitRun(ctx, t, s.id)
	if err != nil {
		counts.Lost++
		return fmt.Errorf("a run of %s (%s): %w", agent, s.id, err)
	}
	counts.Turns += run.Turn
	if run.Status != agentfleet.StatusCompleted {
		counts.Failed++
		counts.FailedExamples = append(counts.FailedExamples, s.id+": "+run.Error)
		return fmt.Errorf("a run of %s (%s) ended %s: %s", agent, s.id, run.Status, run.Error)
	}
	counts.Completed++
	return nil
}

func (f *ToolsFigures) rows(row func(k, format string, a ...any)) {
	row("declaration", "%.0f chars per tool (%d to %d) over the server's %d tools", f.DeclCharsPerTool, f.DeclCharsMin, f.DeclCharsMax, f.ServerTools)
	row("first prompt", "no tools %d chars; %d tools declared %d (+%d); all %d as a catalog line %d (+%d)",
		f.PromptNoTools, ToolsDeclared, f.PromptDeclared, f.PromptDeclared-f.PromptNoTools, f.ServerTools, f.PromptCatalog, f.PromptCatalog-f.PromptNoTools)
	row("direct call", "%s", f.Direct)
	row("script, read-only", "%s", f.FleetReadOnly)
	row("script, journaled", "%s", f.FleetJournaled)
	row("added at p50", "%s read-only, %s journaled (target %s)", f.AddedP50, f.AddedP50Journaled, f.Target)
}
