package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// testServer is an in-process MCP server (the SDK's own) behind a real
// HTTP listener, counting the tools/list requests it answers and
// recording the Authorization headers it received.
type testServer struct {
	*sdk.Server
	URL    string
	lists  atomic.Int32
	mu     sync.Mutex
	auth   []string
	closed chan struct{} // closed when the test ends: slow handlers return
	http   *httptest.Server
}

func newTestServer(t *testing.T, opts *sdk.ServerOptions, wrap func(http.Handler) http.Handler) *testServer {
	t.Helper()
	ts := &testServer{closed: make(chan struct{})}
	ts.Server = sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	ts.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				ts.lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return ts.Server }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.auth = append(ts.auth, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		inner.ServeHTTP(w, r)
	})
	ts.http = httptest.NewServer(h)
	ts.URL = ts.http.URL
	t.Cleanup(func() {
		close(ts.closed)
		ts.http.CloseClientConnections()
		ts.http.Close()
	})
	return ts
}

func (ts *testServer) authHeaders() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.auth...)
}

func textResult(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// addTool adds a tool taking {a: number, b: number}.
func addTool(s *sdk.Server, name string, h sdk.ToolHandler) {
	s.AddTool(&sdk.Tool{
		Name:        name,
		Description: "Tool " + name,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a"]}`),
	}, h)
}

func sumArgs(req *sdk.CallToolRequest) (float64, error) {
	var in struct{ A, B float64 }
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return 0, err
	}
	return in.A + in.B, nil
}

func dial(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	c, err := Dial(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClientListsAndCalls(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	addTool(ts.Server, "get-sum", func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		sum, err := sumArgs(req)
		if err != nil {
			return nil, err
		}
		return textResult(fmt.Sprintf("the sum is %g", sum)), nil
	})
	ts.AddTool(&sdk.Tool{
		Name: "weather", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: `{"temp":21}`}},
			StructuredContent: map[string]any{"temp": 21, "sky": "clear"},
		}, nil
	})
	ts.AddTool(&sdk.Tool{Name: "two", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "one"}, &sdk.ImageContent{MIMEType: "image/png", Data: []byte{1}}, &sdk.TextContent{Text: "two"}}}, nil
		})
	ts.AddTool(&sdk.Tool{Name: "fails", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such repository"}}}, nil
		})

	c := dial(t, Config{Name: "calc", URL: ts.URL, Header: func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }})
	t.Logf("negotiated protocol %s", c.ProtocolVersion())
	list, err := c.ListTools(context.Background())
	require.NoError(t, err)
	require.False(t, list.Cut)
	require.Nil(t, list.Notes())
	names := make([]string, len(list.Tools))
	for i, tl := range list.Tools {
		names[i] = tl.Name
	}
	require.ElementsMatch(t, []string{"get-sum", "weather", "two", "fails"}, names)
	w, ok := list.Lookup("weather")
	require.True(t, ok)
	require.True(t, w.ReadOnly)
	g, _ := list.Lookup("get-sum")
	require.False(t, g.ReadOnly)
	require.JSONEq(t, `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a"]}`, string(g.InputSchema))

	// Text content: the sum tool's handler computes; the text is what it said.
	res, err := c.Call(context.Background(), "get-sum", json.RawMessage(`{"a":2,"b":3}`))
	require.NoError(t, err)
	require.Nil(t, res.Structured)
	require.Equal(t, "the sum is 5", res.Value())

	// Structured content wins over the text.
	res, err = c.Call(context.Background(), "weather", nil)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"temp": float64(21), "sky": "clear"}, res.Value())

	// Text blocks are joined; other content is left out.
	res, err = c.Call(context.Background(), "two", json.RawMessage(`{}`))
	require.NoError(t, err)
	require.Equal(t, "one\ntwo", res.Value())

	// isError is a ToolError carrying the tool's text.
	_, err = c.Call(context.Background(), "fails", nil)
	var te *ToolError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "no such repository", te.Text)
	require.Equal(t, "calc", te.Server)
	require.Contains(t, err.Error(), "mcp:calc tool fails failed: no such repository")

	// An unknown tool is an error, not a panic, and the session lives on.
	_, err = c.Call(context.Background(), "nope", nil)
	require.Error(t, err)
	require.False(t, errors.As(err, &te))
	_, err = c.Call(context.Background(), "get-sum", json.RawMessage(`[1,2]`))
	require.ErrorContains(t, err, "arguments must be a JSON object")
	_, err = c.Call(context.Background(), "two", nil)
	require.NoError(t, err)

	// The caller's header reached the server on every request.
	auth := ts.authHeaders()
	require.NotEmpty(t, auth)
	for _, a := range auth {
		require.Equal(t, "Bearer s3cret", a)
	}
}

func TestClientPagesAndCutsTools(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return textResult(""), nil }

	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		ts := newTestServer(t, &sdk.ServerOptions{PageSize: 7}, nil)
		for i := range 20 {
			addTool(ts.Server, fmt.Sprintf("t%02d", i), noop)
		}
		list, err := dial(t, Config{URL: ts.URL}).ListTools(context.Background())
		require.NoError(t, err)
		require.Len(t, list.Tools, 20)
		require.False(t, list.Cut)
		require.Equal(t, int32(3), ts.lists.Load())
	})

	t.Run("10000 tools", func(t *testing.T) {
		t.Parallel()
		ts := newTestServer(t, nil, nil)
		for i := range 10000 {
			addTool(ts.Server, fmt.Sprintf("tool_%05d", i), noop)
		}
		list, err := dial(t, Config{Name: "big", URL: ts.URL}).ListTools(context.Background())
		require.NoError(t, err)
		require.Len(t, list.Tools, MaxToolsDefault)
		require.True(t, list.Cut)
		require.Equal(t, []string{"mcp:big lists more than 1000 tools; only the first 1000 are available"}, list.Notes())
		// The cut stops paging: 10 pages exist, one was read.
		require.Equal(t, int32(1), ts.lists.Load())
		decl := Declaration("big", list.Tools, list.Notes()...)
		require.Contains(t, decl, "1000 tools: ")
		require.Contains(t, decl, "\n// mcp:big lists more than 1000 tools")
	})

	t.Run("cut inside a page", func(t *testing.T) {
		t.Parallel()
		ts := newTestServer(t, nil, nil)
		for i := range 30 {
			addTool(ts.Server, fmt.Sprintf("tool_%02d", i), noop)
		}
		list, err := dial(t, Config{URL: ts.URL, MaxTools: 25}).ListTools(context.Background())
		require.NoError(t, err)
		require.Len(t, list.Tools, 25)
		require.True(t, list.Cut)
	})
}

func TestClientCutsHugeSchema(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	huge := strings.Repeat("x", 10<<20)
	ts.AddTool(&sdk.Tool{
		Name: "huge", Description: "A tool with a 10 MiB schema",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string", "description": huge}}},
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return textResult("ran"), nil
	})
	addTool(ts.Server, "small", func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return textResult(""), nil })

	c := dial(t, Config{Name: "s", URL: ts.URL})
	list, err := c.ListTools(context.Background())
	require.NoError(t, err)
	h, ok := list.Lookup("huge")
	require.True(t, ok)
	require.True(t, h.SchemaCut)
	require.Nil(t, h.InputSchema)
	require.Greater(t, h.SchemaBytes, 10<<20)
	small, _ := list.Lookup("small")
	require.False(t, small.SchemaCut)
	notes := list.Notes()
	require.Len(t, notes, 1)
	require.Contains(t, notes[0], "mcp:s tool huge: its input schema of")
	require.Contains(t, notes[0], "bytes is cut")
	line := DeclLine(list.Tools, h)
	require.True(t, strings.HasPrefix(line, "huge(args?: any): any; // A tool with a 10 MiB schema (input schema of "), line)
	require.Less(t, len(line), 200)
	// The tool stays callable.
	res, err := c.Call(context.Background(), "huge", json.RawMessage(`{"q":"x"}`))
	require.NoError(t, err)
	require.Equal(t, "ran", res.Text)
}

func TestClientBoundsResponses(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	ts.AddTool(&sdk.Tool{Name: "flood", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return textResult(strings.Repeat("y", 1<<20)), nil
		})
	c := dial(t, Config{Name: "f", URL: ts.URL, MaxResponseBytes: 256 << 10})
	_, err := c.Call(context.Background(), "flood", nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "mcp:f: call flood")
}

func TestClientServerDown(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	start := time.Now()
	_, err := Dial(context.Background(), Config{Name: "gone", URL: url})
	require.Error(t, err)
	require.Contains(t, err.Error(), "mcp:gone: connect")
	require.Less(t, time.Since(start), 10*time.Second)

	// A server that goes away under a live session fails the call.
	ts := newTestServer(t, nil, nil)
	addTool(ts.Server, "t", func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return textResult("ok"), nil })
	c := dial(t, Config{Name: "later", URL: ts.URL})
	_, err = c.Call(context.Background(), "t", nil)
	require.NoError(t, err)
	ts.http.CloseClientConnections()
	ts.http.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.Call(ctx, "t", nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "mcp:later: call t")
}

func TestClientSlowServer(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	ts.AddTool(&sdk.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			select {
			case <-ctx.Done():
			case <-ts.closed:
			}
			return textResult("late"), nil
		})
	c := dial(t, Config{Name: "slow", URL: ts.URL, CallTimeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := c.Call(context.Background(), "slow", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "mcp:slow: call slow: the server did not answer in time")
	require.Less(t, time.Since(start), 5*time.Second)

	// The caller's own deadline bounds it too.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c2 := dial(t, Config{Name: "slow", URL: ts.URL})
	_, err = c2.Call(ctx, "slow", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A server that never answers initialize fails the dial in time.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	_, err = Dial(context.Background(), Config{Name: "hang", URL: hang.URL, DialTimeout: 200 * time.Millisecond})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "mcp:hang: connect: the server did not answer in time")
}

func TestClientGarbage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"html", "text/html", "<html><body>hello</body></html>", 200},
		{"bad json", "application/json", `{"jsonrpc":"2.0","id":`, 200},
		{"not jsonrpc", "application/json", `{"hello":"world"}`, 200},
		{"bad sse", "text/event-stream", "data: {{{{\n\n", 200},
		{"500", "text/plain", "boom", 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			start := time.Now()
			_, err := Dial(context.Background(), Config{Name: "junk", URL: srv.URL, DialTimeout: 5 * time.Second})
			require.Error(t, err)
			require.Contains(t, err.Error(), "mcp:junk: connect")
			t.Logf("%s: %v (%s)", tc.name, err, time.Since(start))
		})
	}

	// Garbage on a call, after a good initialize and listing.
	ts := newTestServer(t, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				b, _ := io.ReadAll(r.Body)
				if strings.Contains(string(b), `"tools/call"`) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`)
					return
				}
				r.Body = io.NopCloser(strings.NewReader(string(b)))
			}
			next.ServeHTTP(w, r)
		})
	})
	addTool(ts.Server, "t", func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return textResult("ok"), nil })
	c := dial(t, Config{Name: "junk", URL: ts.URL, CallTimeout: 5 * time.Second})
	_, err := c.ListTools(context.Background())
	require.NoError(t, err)
	_, err = c.Call(context.Background(), "t", nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "mcp:junk: call t")
	t.Logf("garbage call: %v", err)
}

// A failed dial or a failed call leaves no goroutine behind: the worker
// dials servers for every agent version and must not accumulate them.
func TestClientFailuresLeaveNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	junk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"hello":"world"}`)
	}))
	_, err := Dial(context.Background(), Config{Name: "junk", URL: junk.URL})
	require.Error(t, err)
	junk.Close()
	_, err = Dial(context.Background(), Config{Name: "gone", URL: junk.URL})
	require.Error(t, err)

	ts := newTestServer(t, nil, nil)
	release := make(chan struct{})
	ts.AddTool(&sdk.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return textResult("late"), nil
		})
	c, err := Dial(context.Background(), Config{Name: "slow", URL: ts.URL, CallTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	_, err = c.Call(context.Background(), "slow", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	require.NoError(t, c.Close())
	ts.http.CloseClientConnections()
	ts.http.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}
