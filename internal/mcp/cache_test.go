package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// clock is a time a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func okTool(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	return textResult("ok"), nil
}

func names(l *ToolList) []string {
	out := make([]string, len(l.Tools))
	for i, t := range l.Tools {
		out[i] = t.Name
	}
	return out
}

func TestCacheRefreshesOnListChanged(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	addTool(ts.Server, "first", okTool)
	cache := NewCache(CacheConfig{})
	t.Cleanup(func() { _ = cache.Close() })
	key := Key{Tenant: "t", Agent: "a", Version: 1, Server: "s"}
	cfg := Config{Name: "s", URL: ts.URL}
	ctx := context.Background()

	list, err := cache.Tools(ctx, key, cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, names(list))
	// Served from the cache.
	_, err = cache.Tools(ctx, key, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(1), ts.lists.Load())

	// The server adds a tool and says so: the cache lists again in the
	// background, long before the TTL.
	addTool(ts.Server, "second", okTool)
	require.Eventually(t, func() bool { return ts.lists.Load() >= 2 }, 10*time.Second, 10*time.Millisecond)
	list, err = cache.Tools(ctx, key, cfg)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"first", "second"}, names(list))

	// And once more for a removal.
	ts.RemoveTools("first")
	require.Eventually(t, func() bool {
		l, err := cache.Tools(ctx, key, cfg)
		return err == nil && len(l.Tools) == 1 && l.Tools[0].Name == "second"
	}, 10*time.Second, 10*time.Millisecond)
}

func TestCacheTTLAndKeys(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, nil)
	addTool(ts.Server, "t", okTool)
	clk := &clock{now: time.Unix(1_000_000, 0)}
	cache := NewCache(CacheConfig{Now: clk.Now, MaxEntries: 2})
	t.Cleanup(func() { _ = cache.Close() })
	cfg := Config{Name: "s", URL: ts.URL}
	ctx := context.Background()
	v1 := Key{Tenant: "t", Agent: "a", Version: 1, Server: "s"}

	_, err := cache.Tools(ctx, v1, cfg)
	require.NoError(t, err)
	clk.Add(TTLDefault - time.Second)
	_, err = cache.Tools(ctx, v1, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(1), ts.lists.Load())
	clk.Add(time.Second)
	_, err = cache.Tools(ctx, v1, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(2), ts.lists.Load(), "listed again after 10 minutes")

	// Another agent version, another tenant: their own lists.
	v2 := v1
	v2.Version = 2
	clk.Add(time.Second) // so v1 is the least recently used
	_, err = cache.Tools(ctx, v2, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(3), ts.lists.Load())
	other := v1
	other.Tenant = "u"
	_, err = cache.Tools(ctx, other, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(4), ts.lists.Load())
	// Bounded: the least recently used (v1) went.
	require.Equal(t, 2, cache.Len())
	_, err = cache.Tools(ctx, v2, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(4), ts.lists.Load())
	_, err = cache.Tools(ctx, v1, cfg)
	require.NoError(t, err)
	require.Equal(t, int32(5), ts.lists.Load())

	// Calls go through the key's session.
	res, err := cache.Call(ctx, v1, cfg, "t", json.RawMessage(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, "ok", res.Text)

	// Sessions unused for a TTL are ended by the sweep.
	clk.Add(time.Minute)
	_, err = cache.Tools(ctx, v2, cfg)
	require.NoError(t, err)
	clk.Add(TTLDefault - time.Minute)
	cache.sweep()
	require.Equal(t, 1, cache.Len(), "v1 idle for a TTL went, v2 used a minute later stays")
}

func TestCacheCloseStopsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ts := newTestServer(t, nil, nil)
	addTool(ts.Server, "t", okTool)
	cache := NewCache(CacheConfig{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := Key{Tenant: "t", Agent: fmt.Sprint("a", i%3), Version: 1, Server: "s"}
			cfg := Config{Name: "s", URL: ts.URL}
			_, err := cache.Tools(ctx, key, cfg)
			if err == nil {
				_, err = cache.Call(ctx, key, cfg, "t", nil)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 3, cache.Len())
	require.NoError(t, cache.Close())
	require.NoError(t, cache.Close())
	_, err := cache.Tools(ctx, Key{}, Config{URL: ts.URL})
	require.ErrorIs(t, err, ErrClosed)
	ts.http.CloseClientConnections()
	ts.http.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestCacheRedialsAfterServerRestart(t *testing.T) {
	t.Parallel()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	addTool(srv, "t", okTool)
	var current atomic.Pointer[sdk.StreamableHTTPHandler]
	restart := func() {
		current.Store(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	}
	restart()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })

	cache := NewCache(CacheConfig{})
	t.Cleanup(func() { _ = cache.Close() })
	key := Key{Tenant: "t", Agent: "a", Version: 1, Server: "s"}
	cfg := Config{Name: "s", URL: hs.URL}
	ctx := context.Background()
	_, err := cache.Call(ctx, key, cfg, "t", nil)
	require.NoError(t, err)

	// The server restarts and forgets its sessions: at most one call
	// fails (naming the server), and the one after it dials afresh.
	restart()
	_, err = cache.Call(ctx, key, cfg, "t", nil)
	if err != nil {
		require.Contains(t, err.Error(), "mcp:s: call t")
		t.Logf("first call after the restart: %v", err)
	}
	res, err := cache.Call(ctx, key, cfg, "t", nil)
	require.NoError(t, err)
	require.Equal(t, "ok", res.Text)
}
