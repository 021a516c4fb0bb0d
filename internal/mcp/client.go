// Package mcp owns the fleet's side of the Model Context Protocol: a client
// for one MCP server over streamable HTTP (initialize, tools/list cut to
// bounds, tools/call), a cache of tool lists per agent version refreshed
// on tools/list_changed or after a TTL, and the TypeScript declarations a
// prompt shows for a server's allowed tools. It does not know the sandbox,
// the policy or the journal: the caller supplies the egress-guarded HTTP
// client and the credentials, and decides what a script may call.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults for Config's bounds.
const (
	MaxToolsDefault         = 1000
	MaxSchemaBytesDefault   = 64 << 10
	MaxResponseBytesDefault = 32 << 20
	DialTimeoutDefault      = 30 * time.Second
	CallTimeoutDefault      = 60 * time.Second

	// maxDescriptionBytes bounds a kept tool description: the prompt shows
	// one line of it, help at most that line too.
	maxDescriptionBytes = 1 << 10
	// maxPages bounds tools/list paging, so a server whose cursors never
	// end cannot hold a listing open.
	maxPages = 200
)

// Config says how to reach one MCP server.
type Config struct {
	// Name is the server's name in the agent (mcp:<Name>); errors carry it.
	Name string
	// URL is the server's streamable HTTP endpoint.
	URL string
	// HTTPClient sends every request (the fleet's egress-guarded client).
	// Its Timeout should be zero: the standalone event stream is
	// long-lived, and calls are bounded by their context instead.
	// Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Header, when set, is called on each outgoing request just before it
	// is sent, so the caller can add credentials the script never sees.
	// It sees every request, redirects included: it must check the
	// request's URL (host, https) before adding a secret.
	Header func(*http.Request)
	// OnToolsChanged, when set, is called (on the SDK's goroutine; it must
	// not block) when the server sends notifications/tools/list_changed.
	OnToolsChanged func()

	MaxTools         int           // tools kept from tools/list; MaxToolsDefault
	MaxSchemaBytes   int           // bytes of one input schema kept; MaxSchemaBytesDefault
	MaxResponseBytes int64         // bytes of one response body read; MaxResponseBytesDefault
	DialTimeout      time.Duration // bound on connect + initialize; DialTimeoutDefault
	CallTimeout      time.Duration // bound on one call or listing; CallTimeoutDefault
}

func (c *Config) defaults() {
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.MaxTools <= 0 {
		c.MaxTools = MaxToolsDefault
	}
	if c.MaxSchemaBytes <= 0 {
		c.MaxSchemaBytes = MaxSchemaBytesDefault
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = MaxResponseBytesDefault
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DialTimeoutDefault
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = CallTimeoutDefault
	}
}

// Tool is one tool a server lists, cut to the bounds.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the tool's JSON schema, or nil when it was cut.
	InputSchema json.RawMessage
	// SchemaBytes is the size of the schema the server sent; when it is
	// larger than the bound, InputSchema is nil and SchemaCut is set.
	SchemaBytes int
	SchemaCut   bool
	// ReadOnly is the tool's readOnlyHint annotation: it does not modify
	// its environment (the journal and approvals treat it so).
	ReadOnly bool
}

// ToolList is a server's tools as listed, in the server's order.
type ToolList struct {
	Server string
	Tools  []Tool
	// Cut is set when the server listed more than MaxTools tools: Tools
	// holds the first MaxTools.
	Cut      bool
	MaxTools int
	// Skipped counts listed tools dropped for having no usable name.
	Skipped int
	Fetched time.Time
}

// Lookup returns the tool named name (a tool name, not an alias).
func (l *ToolList) Lookup(name string) (Tool, bool) {
	for _, t := range l.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Notes says what was cut from the list, one sentence each, for the
// prompt and the logs; nil when nothing was.
func (l *ToolList) Notes() []string {
	var out []string
	if l.Cut {
		out = append(out, fmt.Sprintf("mcp:%s lists more than %d tools; only the first %d are available", l.Server, l.MaxTools, l.MaxTools))
	}
	if l.Skipped > 0 {
		out = append(out, fmt.Sprintf("mcp:%s listed %d tools with no usable name; they are left out", l.Server, l.Skipped))
	}
	for _, t := range l.Tools {
		if t.SchemaCut {
			out = append(out, fmt.Sprintf("mcp:%s tool %s: its input schema of %d bytes is cut (over the bound); its arguments are not declared", l.Server, t.Name, t.SchemaBytes))
		}
	}
	return out
}

// Result is what a tool call returned.
type Result struct {
	// Structured is the tool's structured content, when it sent one.
	Structured json.RawMessage
	// Text is its text content, the text blocks joined by newlines.
	Text string
}

// Value is what a script gets back: the structured content decoded when
// there is one, else the text.
func (r Result) Value() any {
	if r.Structured != nil {
		var v any
		if json.Unmarshal(r.Structured, &v) == nil {
			return v
		}
	}
	return r.Text
}

// ToolError is a tool result with isError set: the tool ran and failed.
// Text is what it said.
type ToolError struct {
	Server, Tool, Text string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("mcp:%s tool %s failed: %s", e.Server, e.Tool, e.Text)
}

// Client is a session with one MCP server. Safe for concurrent use.
type Client struct {
	cfg     Config
	session *sdk.ClientSession
}

// Dial connects to the server and initializes a session.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg.defaults()
	if cfg.URL == "" {
		return nil, fmt.Errorf("mcp:%s: no url", cfg.Name)
	}
	hc := *cfg.HTTPClient
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &sendTransport{base: base, header: cfg.Header, limit: cfg.MaxResponseBytes}

	opts := &sdk.ClientOptions{
		// No roots, sampling or elicitation: the fleet offers the server
		// nothing but calls.
		Capabilities: &sdk.ClientCapabilities{},
	}
	if f := cfg.OnToolsChanged; f != nil {
		opts.ToolListChangedHandler = func(context.Context, *sdk.ToolListChangedRequest) { f() }
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "agentfleet", Version: "1"}, opts)
	transport := &sdk.StreamableClientTransport{
		Endpoint:     cfg.URL,
		HTTPClient:   &hc,
		MaxRetries:   2,
		MaxEventSize: int(cfg.MaxResponseBytes),
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	session, err := client.Connect(dctx, transport, nil)
	if err != nil {
		return nil, cfg.wrap(dctx, "connect", err)
	}
	return &Client{cfg: cfg, session: session}, nil
}

// Name is the server's name.
func (c *Client) Name() string { return c.cfg.Name }

// ProtocolVersion is the MCP version the session negotiated.
func (c *Client) ProtocolVersion() string {
	if r := c.session.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

// Close ends the session.
func (c *Client) Close() error {
	return c.session.Close()
}

// ListTools lists the server's tools, following its pages, cut to
// MaxTools tools and each schema to MaxSchemaBytes.
func (c *Client) ListTools(ctx context.Context) (*ToolList, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	list := &ToolList{Server: c.cfg.Name, MaxTools: c.cfg.MaxTools}
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("mcp:%s: tools/list: more than %d pages", c.cfg.Name, maxPages)
		}
		res, err := c.session.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, c.cfg.wrap(ctx, "tools/list", err)
		}
		for _, t := range res.Tools {
			if len(list.Tools) == c.cfg.MaxTools {
				list.Cut = true
				break
			}
			if t == nil || t.Name == "" || len(t.Name) > 128 || seen[t.Name] {
				list.Skipped++
				continue
			}
			seen[t.Name] = true
			list.Tools = append(list.Tools, c.cut(t))
		}
		if list.Cut || res.NextCursor == "" {
			break
		}
		if len(list.Tools) == c.cfg.MaxTools {
			// More pages follow a full list: they are not read.
			list.Cut = true
			break
		}
		if res.NextCursor == cursor {
			return nil, fmt.Errorf("mcp:%s: tools/list: the server repeats cursor %q", c.cfg.Name, cursor)
		}
		cursor = res.NextCursor
	}
	list.Fetched = time.Now()
	return list, nil
}

func (c *Client) cut(t *sdk.Tool) Tool {
	out := Tool{Name: t.Name, Description: t.Description}
	if len(out.Description) > maxDescriptionBytes {
		out.Description = strings.ToValidUTF8(out.Description[:maxDescriptionBytes], "")
	}
	if t.Annotations != nil {
		out.ReadOnly = t.Annotations.ReadOnlyHint
	}
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err == nil {
			out.SchemaBytes = len(b)
			if len(b) > c.cfg.MaxSchemaBytes {
				out.SchemaCut = true
			} else {
				out.InputSchema = b
			}
		}
	}
	return out
}

// Call calls the tool with args (a JSON object; nil means {}). A result
// with isError set is a *ToolError; a server that is down, slow past the
// call timeout or answers garbage is an error naming the server.
func (c *Client) Call(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var arguments any = map[string]any{}
	if len(args) > 0 && string(args) != "null" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			return Result{}, fmt.Errorf("mcp:%s tool %s: arguments must be a JSON object: %w", c.cfg.Name, tool, err)
		}
		arguments = args
	}
	res, err := c.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: arguments})
	if err != nil {
		return Result{}, c.cfg.wrap(ctx, "call "+tool, err)
	}
	var out Result
	var texts []string
	for _, content := range res.Content {
		if tc, ok := content.(*sdk.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	out.Text = strings.Join(texts, "\n")
	if res.IsError {
		return Result{}, &ToolError{Server: c.cfg.Name, Tool: tool, Text: out.Text}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return Result{}, fmt.Errorf("mcp:%s tool %s: structured content: %w", c.cfg.Name, tool, err)
		}
		out.Structured = b
	}
	return out, nil
}

// wrap names the server and the step, and says plainly when the deadline
// was what ended it.
func (c *Config) wrap(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("mcp:%s: %s: the server did not answer in time: %w", c.Name, step, context.DeadlineExceeded)
	}
	return fmt.Errorf("mcp:%s: %s: %w", c.Name, step, err)
}

// sendTransport adds the caller's headers at send time and bounds each
// response body, so a server cannot make the worker read without end.
type sendTransport struct {
	base   http.RoundTripper
	header func(*http.Request)
	limit  int64
}

func (t *sendTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.header != nil {
		req = req.Clone(req.Context())
		t.header(req)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method == http.MethodGet {
		// The standalone event stream (GET) lives as long as the session;
		// its events are bounded one by one by the SDK instead.
		return resp, err
	}
	resp.Body = &limitedBody{r: resp.Body, left: t.limit}
	return resp, nil
}

type limitedBody struct {
	r    io.ReadCloser
	left int64
}

var errResponseTooLarge = errors.New("response body over the bound")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, errResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.r.Close() }
