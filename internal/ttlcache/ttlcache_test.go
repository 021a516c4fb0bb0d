package ttlcache

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestCache(t *testing.T, ttl time.Duration, limit int) (*Cache[string, int], *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := New[string, int](ttl, limit)
	require.NotNil(t, c)
	c.now = clk.Now
	return c, clk
}

func TestCacheExpires(t *testing.T) {
	t.Parallel()
	c, clk := newTestCache(t, time.Second, 10)

	_, ok := c.Get("a")
	require.False(t, ok, "an empty cache misses")
	c.Put("a", 1)
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)

	clk.advance(time.Second - time.Nanosecond)
	v, ok = c.Get("a")
	require.True(t, ok, "still within the ttl")
	require.Equal(t, 1, v)

	clk.advance(time.Nanosecond)
	_, ok = c.Get("a")
	require.False(t, ok, "expired at exactly ttl")
	require.Zero(t, c.Len(), "an expired entry is dropped when it is read")

	// Putting again starts a new ttl and replaces the value.
	c.Put("a", 2)
	clk.advance(time.Second / 2)
	c.Put("a", 3)
	clk.advance(time.Second * 3 / 4)
	v, ok = c.Get("a")
	require.True(t, ok, "the second put restarted the ttl")
	require.Equal(t, 3, v)
}

func TestCacheOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl   time.Duration
		limit int
	}{{0, 10}, {-time.Second, 10}, {time.Second, 0}} {
		c := New[string, int](tc.ttl, tc.limit)
		require.Nil(t, c, "ttl %v, limit %d", tc.ttl, tc.limit)
		c.Put("a", 1)
		_, ok := c.Get("a")
		require.False(t, ok, "a nil cache holds nothing")
		require.Zero(t, c.Len())
	}
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()

	t.Run("live keys", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestCache(t, time.Hour, 8)
		for i := range 1000 {
			k := fmt.Sprint(i)
			c.Put(k, i)
			require.LessOrEqual(t, c.Len(), 8, "after %d puts", i+1)
			v, ok := c.Get(k)
			require.True(t, ok, "the entry just put is held")
			require.Equal(t, i, v)
		}
		// Overwriting a held key never evicts.
		n := c.Len()
		for range 10 {
			c.Put("999", 999)
		}
		require.Equal(t, n, c.Len())
	})

	t.Run("expired go first", func(t *testing.T) {
		t.Parallel()
		c, clk := newTestCache(t, time.Second, 4)
		c.Put("old1", 1)
		c.Put("old2", 2)
		clk.advance(time.Second)
		c.Put("new1", 3)
		c.Put("new2", 4)
		require.Equal(t, 4, c.Len())
		c.Put("new3", 5)
		require.Equal(t, 3, c.Len(), "the two expired entries made room; no live one was dropped")
		for _, k := range []string{"new1", "new2", "new3"} {
			_, ok := c.Get(k)
			require.True(t, ok, k)
		}
	})

	t.Run("limit one", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestCache(t, time.Hour, 1)
		c.Put("a", 1)
		c.Put("b", 2)
		require.Equal(t, 1, c.Len())
		v, ok := c.Get("b")
		require.True(t, ok)
		require.Equal(t, 2, v)
	})

	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		c := New[int, int](time.Hour, 64)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 2000 {
					k := g*2000 + i
					c.Put(k, k)
					if v, ok := c.Get(k); ok && v != k {
						t.Errorf("get(%d) = %d", k, v)
					}
				}
			})
		}
		wg.Wait()
		require.LessOrEqual(t, c.Len(), 64)
	})
}

func TestCacheDelete(t *testing.T) {
	t.Parallel()
	c, _ := newTestCache(t, time.Minute, 10)
	for i := range 6 {
		c.Put(fmt.Sprint("k", i), i)
	}
	c.Delete("k0")
	c.Delete("nope")
	_, ok := c.Get("k0")
	require.False(t, ok)
	require.Equal(t, 3, c.DeleteFunc(func(_ string, v int) bool { return v%2 == 1 }))
	for i := 1; i < 6; i++ {
		_, ok := c.Get(fmt.Sprint("k", i))
		require.Equal(t, i%2 == 0, ok, "k%d", i)
	}

	var off *Cache[string, int]
	off.Delete("k")
	require.Zero(t, off.DeleteFunc(func(string, int) bool { return true }))
}
