// Package mcptest runs the reference MCP server from the npm registry,
// @modelcontextprotocol/server-everything, for the tests that talk to a
// real MCP peer (internal/mcp's interoperability test and the fleet's).
package mcptest

import (
	"bytes"
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

// Environment variables the tests read: the directory of an installed
// @modelcontextprotocol/server-everything (.ci/run installs it), and the
// switch that turns a skip into a failure (set in CI).
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

// StartEverything runs the npm server in streamable HTTP mode on a free
// loopback port and returns its endpoint; it is killed when t ends.
func StartEverything(t testing.TB) string {
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
