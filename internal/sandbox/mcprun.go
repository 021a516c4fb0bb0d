// MCP servers at run time (ExecRequest.MCP): require('mcp:<name>') in the
// child is one function per allowed tool; each call is a host call the
// parent makes through the pool's mcp.Cache, over the agent's egress
// guard, with the server's secret added only over HTTPS to the secret's
// hosts. Calls pass the policy and approvals; a tool without readOnlyHint
// is journaled.

package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/dop251/goja"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/mcp"
)

// mcpCallArgs is the host call of a require('mcp:<server>') tool.
type mcpCallArgs struct {
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
}

// mcpKey is the cache key of one server of the turn's agent: the tenant
// and a digest of everything a session is bound to (URL, allow-list,
// egress, the secret's value and hosts), so a new agent version or a
// rotated secret never reuses an old session or list.
func mcpKey(req *agentfleet.ExecRequest, s agentfleet.MCPServer) mcp.Key {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", s.Name, s.URL, strings.Join(s.Tools, "\x01"), strings.Join(req.Egress, "\x01"))
	if c := mcpCred(req, s); c != nil {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", c.Name, credHeader(c), credValue(c), strings.Join(c.Hosts, "\x01"))
	}
	return mcp.Key{Tenant: req.Tenant, Agent: hex.EncodeToString(h.Sum(nil)[:16]), Server: s.Name}
}

func mcpCred(req *agentfleet.ExecRequest, s agentfleet.MCPServer) *agentfleet.OpenSecret {
	if s.Secret == "" {
		return nil
	}
	for i := range req.Credentials {
		if req.Credentials[i].Name == s.Secret {
			return &req.Credentials[i]
		}
	}
	return nil
}

// mcpConfig is how the pool reaches s for req: the egress-guarded client
// of the agent's egress, and a Header hook that sends the server's
// secret only over HTTPS to the secret's hosts.
func (p *Pool) mcpConfig(req *agentfleet.ExecRequest, s agentfleet.MCPServer) (mcp.Config, error) {
	n, err := p.netFor(req.Egress)
	if err != nil {
		return mcp.Config{}, fmt.Errorf("mcp:%s: the agent's egress: %v", s.Name, err)
	}
	client := *n.client
	client.Timeout = 0 // the session's event stream is long-lived; calls are bounded by their context
	cfg := mcp.Config{Name: s.Name, URL: s.URL, HTTPClient: &client}
	if c := mcpCred(req, s); c != nil {
		cred := *c
		cfg.Header = func(r *http.Request) {
			if credFor(&cred, r.URL) {
				r.Header.Set(credHeader(&cred), credValue(&cred))
			} else {
				r.Header.Del(credHeader(&cred))
			}
		}
	}
	return cfg, nil
}

// mcpTools lists s's tools (from the cache) and keeps the allowed ones.
func (p *Pool) mcpTools(ctx context.Context, req *agentfleet.ExecRequest, s agentfleet.MCPServer) ([]mcp.Tool, *mcp.ToolList, error) {
	cfg, err := p.mcpConfig(req, s)
	if err != nil {
		return nil, nil, err
	}
	l, err := p.mcp.Tools(ctx, mcpKey(req, s), cfg)
	if err != nil {
		return nil, nil, err
	}
	return mcp.Allowed(l.Tools, s.Tools), l, nil
}

// MCPDeclarations is the prompt's lines for req's MCP servers
// (mcp.Declaration per server), listing their tools through the pool's
// cache; a server that cannot be listed gets one line saying so rather
// than failing the turn.
func (p *Pool) MCPDeclarations(ctx context.Context, req agentfleet.ExecRequest) string {
	var b strings.Builder
	for _, s := range req.MCP {
		tools, l, err := p.mcpTools(ctx, &req, s)
		if err != nil {
			fmt.Fprintf(&b, "// require('mcp:%s'): %s this turn (%s); calling them will fail\n", s.Name, mcpUnlisted, oneLine(err.Error()))
			continue
		}
		b.WriteString(strings.TrimRight(mcp.Declaration(s.Name, tools, l.Notes()...), "\n"))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = string(trimPartialRune([]byte(s[:200]))) + "…"
	}
	return s
}

// mcpUnlisted says a server's tools could not be listed.
const mcpUnlisted = "its tools could not be listed"

// mcpTable is the turn's MCP servers as the child defines them: one line
// per server that could be listed, "mcp:<name> tool..." then a tab and
// its help.
func (p *Pool) mcpTable(ctx context.Context, req *agentfleet.ExecRequest) string {
	var b strings.Builder
	for _, s := range req.MCP {
		tools, l, err := p.mcpTools(ctx, req, s)
		b.WriteString("mcp:" + s.Name)
		if err != nil {
			b.WriteString("\t// require('mcp:" + s.Name + "'): " + mcpUnlisted + ": " + oneLine(err.Error()) + "\n")
			continue
		}
		for _, t := range tools {
			if t.Name == "" || strings.ContainsFunc(t.Name, func(r rune) bool { return r <= ' ' }) {
				continue
			}
			b.WriteByte(' ')
			b.WriteString(t.Name)
		}
		b.WriteByte('\t')
		b.WriteString(strings.ReplaceAll(mcp.Help(s.Name, tools, l.Notes()...), "\n", "\x01"))
		b.WriteByte('\n')
	}
	return b.String()
}

// splitMCP takes the child's MCP servers (mcp:<name>) out of its module
// table.
func splitMCP(all map[string]childModule) (apis, mcps map[string]childModule) {
	for k, m := range all {
		if name, ok := strings.CutPrefix(k, "mcp:"); ok {
			if mcps == nil {
				mcps = map[string]childModule{}
			}
			m.help = strings.ReplaceAll(m.help, "\x01", "\n")
			mcps[name] = m
			delete(all, k)
		}
	}
	return all, mcps
}

// mcpModule is require('mcp:<name>'): one synchronous function per tool,
// by its name and by its camelCase alias (a tool's own name wins).
func (t *turnState) mcpModule(name string, m childModule) *goja.Object {
	o := t.env.vm.NewObject()
	fn := func(tool string) func(goja.FunctionCall) goja.Value {
		return func(c goja.FunctionCall) goja.Value {
			var params []byte
			if p := c.Argument(0); !goja.IsUndefined(p) && !goja.IsNull(p) {
				if _, ok := p.(*goja.Object); !ok {
					t.throw("TypeError", fmt.Sprintf("mcp:%s.%s: give one object of arguments by name", name, tool))
				}
				var err error
				if params, err = t.toJSON(p); err != nil {
					rethrow(err)
				}
			}
			args, _ := json.Marshal(mcpCallArgs{Server: name, Tool: tool, Args: params})
			return t.parseJSON(t.host(primMCP, args))
		}
	}
	for _, tool := range m.ops {
		if a := mcp.Alias(tool); a != "" && !slices.Contains(m.ops, a) {
			_ = o.Set(a, fn(tool))
		}
	}
	for _, tool := range m.ops {
		_ = o.Set(tool, fn(tool))
	}
	return o
}

// mcpHostCall runs one tool call for the child: resolve the tool among
// the allowed ones, journal (a tool without readOnlyHint), policy and
// approvals, call, events.
func (p *Pool) mcpHostCall(ctx context.Context, req *agentfleet.ExecRequest, raw []byte, st *hostState) (byte, []byte) {
	var a mcpCallArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return hostErr("mcp: bad arguments: %v", err)
	}
	i := slices.IndexFunc(req.MCP, func(s agentfleet.MCPServer) bool { return s.Name == a.Server })
	if i < 0 {
		return hostErr("mcp:%s: this agent has no such MCP server", a.Server)
	}
	srv := req.MCP[i]
	tools, _, err := p.mcpTools(ctx, req, srv)
	if err != nil {
		return hostErr("mcp:%s.%s: listing the server's tools failed: %v", a.Server, a.Tool, err)
	}
	ti := slices.IndexFunc(tools, func(t mcp.Tool) bool { return t.Name == a.Tool })
	if ti < 0 {
		return hostErr("mcp:%s.%s: the server has no such tool (or the agent does not allow it)", a.Server, a.Tool)
	}
	readOnly := tools[ti].ReadOnly
	name := "mcp:" + a.Server + "." + a.Tool
	// Canonical arguments: the journal and an approval see one spelling.
	args, _ := json.Marshal(mcpCallArgs{Server: a.Server, Tool: a.Tool, Args: canonicalJSON(a.Args)})

	call := agentfleet.JournalEntry{RunID: req.RunID, Turn: req.Turn, Index: st.calls, Primitive: name}
	journaled := !readOnly
	if journaled {
		st.calls++
		if req.Journal != nil {
			if status, data, ok := replay(ctx, req.Journal, call, st); ok {
				mcpToolEvents(req, st.red, name, args, status, data, true)
				return status, data
			}
		}
	}
	pc := Call{Primitive: name, Args: args, Tenant: req.Tenant, RunID: req.RunID, Turn: req.Turn, Index: st.hostCalls}
	dec, reason := p.cfg.Policy.Check(ctx, pc)
	if dec == Allow && len(req.Approve) > 0 && needsMCPApproval(req.Approve, a.Server, a.Tool, readOnly) {
		dec = NeedsApproval
	}
	switch dec {
	case Allow:
	case NeedsApproval:
		keyed := journaled && req.RunID != ""
		if status, data, ok := p.approval(ctx, req, primMCP, name, pc.Index, args, keyed, reason, st); !ok {
			if status != hostPark {
				mcpToolEvents(req, st.red, name, args, status, data, false)
			}
			return status, data
		}
	default:
		data := []byte(fmt.Sprintf("%s denied by policy: %s", name, orUnspecified(reason)))
		mcpToolEvents(req, st.red, name, args, hostDenied, data, false)
		return hostDenied, data
	}
	mcpToolCallEvent(req, st.red, name, args)
	status, data := p.mcpCall(ctx, req, srv, a)
	if status == hostOK {
		data = st.red.json(data)
	}
	if journaled && req.Journal != nil {
		status, data = record(ctx, req.Journal, call, status, data, st.usage, st)
	}
	mcpToolResultEvent(req, st.red, name, status, data, false)
	return status, data
}

// mcpCall calls the tool: its value (structured content, else text) as
// JSON, or the error the script throws.
func (p *Pool) mcpCall(ctx context.Context, req *agentfleet.ExecRequest, s agentfleet.MCPServer, a mcpCallArgs) (byte, []byte) {
	cfg, err := p.mcpConfig(req, s)
	if err != nil {
		return hostDenied, []byte(err.Error())
	}
	res, err := p.mcp.Call(ctx, mcpKey(req, s), cfg, a.Tool, a.Args)
	var te *mcp.ToolError
	switch {
	case errors.As(err, &te):
		return hostErr("%s", cmpOr(te.Text, fmt.Sprintf("mcp:%s.%s failed (no text)", a.Server, a.Tool)))
	case err != nil && ctx.Err() != nil:
		return hostErr("mcp:%s.%s: the turn was stopped", a.Server, a.Tool)
	case err != nil:
		return hostErr("mcp:%s.%s: calling the tool failed: %v", a.Server, a.Tool, err)
	}
	b, err := json.Marshal(res.Value())
	if err != nil {
		return hostErr("mcp:%s.%s: its result: %v", a.Server, a.Tool, err)
	}
	return hostOK, b
}

// canonicalJSON re-encodes a JSON value with sorted keys (nil when empty).
func canonicalJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	out, _ := json.Marshal(v) // maps marshal with sorted keys
	return out
}

// mcpToolCallEvent tells of a tool call about to be made.
func mcpToolCallEvent(req *agentfleet.ExecRequest, red *redactor, tool string, args []byte) {
	if req.ToolEvent == nil {
		return
	}
	var a mcpCallArgs
	_ = json.Unmarshal(args, &a)
	ev := toolEventArgs{Tool: tool}
	if a.Args != nil {
		ev.Body, ev.Truncated = cutBody(red, string(a.Args))
	}
	doc, _ := json.Marshal(ev)
	req.ToolEvent(agentfleet.Event{Type: agentfleet.EventToolCall, Summary: tool, Args: doc})
}

// mcpToolResultEvent tells of a tool call's outcome: its value or error.
func mcpToolResultEvent(req *agentfleet.ExecRequest, red *redactor, tool string, status byte, data []byte, replayed bool) {
	if req.ToolEvent == nil {
		return
	}
	ev := toolEventArgs{Tool: tool, Replayed: replayed}
	summary := tool
	if status == hostOK {
		ev.Body, ev.Truncated = cutBody(red, string(data))
		summary += " ok"
	} else {
		ev.Error, _ = cutBody(red, string(data))
		summary += failedOrDenied(status)
	}
	if replayed {
		summary += " (replayed from the journal)"
	}
	doc, _ := json.Marshal(ev)
	req.ToolEvent(agentfleet.Event{Type: agentfleet.EventToolResult, Summary: summary, Args: doc})
}

// mcpToolEvents tells of a call not made (replayed, or refused): both
// events, so the run's turn shows it.
func mcpToolEvents(req *agentfleet.ExecRequest, red *redactor, tool string, args []byte, status byte, data []byte, replayed bool) {
	mcpToolCallEvent(req, red, tool, args)
	mcpToolResultEvent(req, red, tool, status, data, replayed)
}
