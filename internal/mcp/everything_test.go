package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Environment variables the interoperability test reads: the directory of
// an installed @modelcontextprotocol/server-everything (.ci/run installs
// it), and the switch that turns a skip into a failure (set in CI).
const (
	EnvEverything = "AGENTFLEET_TEST_MCP_EVERYTHING"
	EnvRequire    = "AGENTFLEET_REQUIRE_INTEGRATION"
)

// lockedBuffer collects the server's output for the test log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startEverything runs the npm server in streamable HTTP mode on a free
// loopback port and returns its endpoint; it is killed when t ends.
func startEverything(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(EnvEverything)
	if dir == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s is unset but %s=1: npm install @modelcontextprotocol/server-everything and point it at node_modules/@modelcontextprotocol/server-everything", EnvEverything, EnvRequire)
		}
		t.Skipf("%s is unset: skipping the test against @modelcontextprotocol/server-everything", EnvEverything)
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed to run %s", dir)
	entry := filepath.Join(dir, "dist", "index.js")
	_, err = os.Stat(entry)
	require.NoError(t, err, "%s does not hold an installed server-everything", dir)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	var out lockedBuffer
	cmd := exec.Command(node, entry, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("server-everything output:\n%s", out.String())
		}
	})

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("server-everything exited before listening: %v\n%s", err, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s within 60s:\n%s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr + "/mcp"
}

// TestEverythingServer is the interoperability test against the reference
// server from the npm registry: list, declare, and call tools of each
// result kind.
func TestEverythingServer(t *testing.T) {
	t.Parallel()
	url := startEverything(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	direct, err := Dial(ctx, Config{Name: "everything", URL: url})
	require.NoError(t, err)
	t.Logf("negotiated protocol %s", direct.ProtocolVersion())
	require.NotEmpty(t, direct.ProtocolVersion())
	require.NoError(t, direct.Close())

	cache := NewCache(CacheConfig{})
	t.Cleanup(func() { _ = cache.Close() })
	key := Key{Tenant: "t1", Agent: "a", Version: 1, Server: "everything"}
	cfg := Config{Name: "everything", URL: url}
	list, err := cache.Tools(ctx, key, cfg)
	require.NoError(t, err)
	require.False(t, list.Cut)
	echo, ok := list.Lookup("echo")
	require.True(t, ok, "tools: %v", list.Tools)
	require.True(t, echo.ReadOnly)
	_, ok = list.Lookup("get-sum")
	require.True(t, ok)

	allowed := Allowed(list.Tools, []string{"echo", "get-sum", "get-structured-content"})
	require.Len(t, allowed, 3)
	decl := Declaration("everything", allowed)
	require.Contains(t, decl, "\n  echo(args: {message: string}): any; // Echoes back the input string (read-only)\n")
	require.Contains(t, decl, "\n  getSum(args: {a: number; b: number}): any; // \"get-sum\": Returns the sum of two numbers (read-only)\n")
	require.Contains(t, decl, `getStructuredContent(args: {location: "New York" | "Chicago" | "Los Angeles"}): any;`)
	t.Logf("declaration:\n%s", decl)

	res, err := cache.Call(ctx, key, cfg, "echo", json.RawMessage(`{"message":"hello from the fleet"}`))
	require.NoError(t, err)
	require.Equal(t, "Echo: hello from the fleet", res.Value())

	name, ok := ToolName(allowed, "getSum")
	require.True(t, ok)
	require.Equal(t, "get-sum", name)
	res, err = cache.Call(ctx, key, cfg, name, json.RawMessage(`{"a":2,"b":40}`))
	require.NoError(t, err)
	require.Equal(t, "The sum of 2 and 40 is 42.", res.Value())

	res, err = cache.Call(ctx, key, cfg, "get-structured-content", json.RawMessage(`{"location":"Chicago"}`))
	require.NoError(t, err)
	require.NotNil(t, res.Structured)
	v, _ := res.Value().(map[string]any)
	require.Equal(t, float64(36), v["temperature"])

	// Arguments the server rejects come back as an error, not a hang.
	_, err = cache.Call(ctx, key, cfg, "get-sum", json.RawMessage(`{"a":"two"}`))
	var te *ToolError
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Text, "Invalid arguments for tool get-sum")
	t.Logf("bad arguments: %v", err)
}
