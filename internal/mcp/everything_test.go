package mcp

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/mcp/mcptest"
	"github.com/stretchr/testify/require"
)

// TestEverythingServer is the interoperability test against the reference
// server from the npm registry: list, declare, and call tools of each
// result kind.
func TestEverythingServer(t *testing.T) {
	t.Parallel()
	url := mcptest.StartEverything(t)
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
