package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for CacheConfig.
const (
	TTLDefault        = 10 * time.Minute
	MaxEntriesDefault = 256
)

// Key names one server of one agent version: tool lists are cached per
// agent version, so a new version (with other servers or another
// allow-list) never sees an old list.
type Key struct {
	Tenant  string
	Agent   string
	Version int
	Server  string
}

// CacheConfig bounds a Cache.
type CacheConfig struct {
	// TTL is how long a tool list is served before it is listed again,
	// and how long an unused session is kept open. TTLDefault.
	TTL time.Duration
	// MaxEntries bounds the sessions (and lists) held. MaxEntriesDefault.
	MaxEntries int
	// Now is the clock; time.Now when nil (tests move it).
	Now func() time.Time
}

// Cache holds one session and its tool list per Key: the list is listed
// again after TTL or once the server sends tools/list_changed (then in
// the background, by the cache's own goroutine, so the next turn need not
// wait). Close stops that goroutine and ends every session. Safe for
// concurrent use.
type Cache struct {
	ttl   time.Duration
	limit int
	now   func() time.Time

	mu     sync.Mutex
	m      map[Key]*entry
	closed bool

	changed chan *entry
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

type entry struct {
	key Key
	cfg Config // as last given, for background refreshes

	mu      sync.Mutex // held while dialling or listing
	client  *Client
	list    *ToolList
	fetched time.Time

	stale atomic.Bool  // tools/list_changed arrived since the list
	inUse atomic.Int32 // calls under way: not evicted while set
	used  time.Time    // under Cache.mu
}

// NewCache returns a cache and starts its goroutine.
func NewCache(cfg CacheConfig) *Cache {
	if cfg.TTL <= 0 {
		cfg.TTL = TTLDefault
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = MaxEntriesDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		ttl: cfg.TTL, limit: cfg.MaxEntries, now: cfg.Now,
		m:       map[Key]*entry{},
		changed: make(chan *entry, 64),
		ctx:     ctx, cancel: cancel,
		done: make(chan struct{}),
	}
	go c.run()
	return c
}

// ErrClosed is returned by a closed Cache.
var ErrClosed = errors.New("mcp: cache closed")

// Tools returns key's tool list, dialling with cfg when there is no
// session and listing when there is no fresh list. The list is shared:
// callers must not change it. cfg.OnToolsChanged is replaced by the
// cache's own.
func (c *Cache) Tools(ctx context.Context, key Key, cfg Config) (*ToolList, error) {
	e, err := c.entry(key, cfg)
	if err != nil {
		return nil, err
	}
	defer e.inUse.Add(-1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.list != nil && !e.stale.Load() && c.now().Sub(e.fetched) < c.ttl {
		return e.list, nil
	}
	return c.refresh(ctx, e)
}

// Call calls tool on key's server, dialling with cfg when there is no
// session. It never retries: a call may have side effects.
func (c *Cache) Call(ctx context.Context, key Key, cfg Config, tool string, args json.RawMessage) (Result, error) {
	e, err := c.entry(key, cfg)
	if err != nil {
		return Result{}, err
	}
	defer e.inUse.Add(-1)
	e.mu.Lock()
	client, err := c.dial(ctx, e)
	e.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	res, err := client.Call(ctx, tool, args)
	var te *ToolError
	if err != nil && !errors.As(err, &te) {
		// The session may be gone (server restarted, stream broken): the
		// next use dials afresh.
		e.mu.Lock()
		if e.client == client {
			e.client = nil
			_ = client.Close()
		}
		e.mu.Unlock()
	}
	return res, err
}

// Len is the number of sessions held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Close stops the cache's goroutine and ends every session.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	entries := make([]*entry, 0, len(c.m))
	for _, e := range c.m {
		entries = append(entries, e)
	}
	c.m = map[Key]*entry{}
	c.mu.Unlock()
	c.cancel()
	<-c.done
	for _, e := range entries {
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
	return nil
}

// entry returns key's entry, marked in use, evicting the least recently
// used idle entry past the bound.
func (c *Cache) entry(key Key, cfg Config) (*entry, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	e := c.m[key]
	if e == nil {
		e = &entry{key: key}
		c.m[key] = e
	}
	e.inUse.Add(1)
	e.used = c.now()
	var evicted *entry
	if len(c.m) > c.limit {
		for _, o := range c.m {
			if o != e && o.inUse.Load() == 0 && (evicted == nil || o.used.Before(evicted.used)) {
				evicted = o
			}
		}
		if evicted != nil {
			delete(c.m, evicted.key)
		}
	}
	c.mu.Unlock()
	e.mu.Lock()
	e.cfg = cfg
	e.mu.Unlock()
	if evicted != nil {
		evicted.mu.Lock()
		evicted.drop()
		evicted.mu.Unlock()
	}
	return e, nil
}

// dial returns e's session, connecting when it has none. e.mu is held.
func (c *Cache) dial(ctx context.Context, e *entry) (*Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	cfg := e.cfg
	cfg.OnToolsChanged = func() {
		e.stale.Store(true)
		select {
		case c.changed <- e:
		default: // the goroutine is busy: the next Tools lists anyway
		}
	}
	client, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.client = client
	return client, nil
}

// refresh lists e's tools. e.mu is held.
func (c *Cache) refresh(ctx context.Context, e *entry) (*ToolList, error) {
	client, err := c.dial(ctx, e)
	if err != nil {
		return nil, err
	}
	e.stale.Store(false)
	list, err := client.ListTools(ctx)
	if err != nil {
		e.stale.Store(true)
		e.drop()
		return nil, err
	}
	e.list, e.fetched = list, c.now()
	return list, nil
}

// drop ends e's session. e.mu is held.
func (e *entry) drop() {
	if e.client != nil {
		_ = e.client.Close()
		e.client = nil
	}
}

// run refreshes lists whose server said they changed, and ends sessions
// unused for a TTL.
func (c *Cache) run() {
	defer close(c.done)
	sweep := time.NewTicker(min(c.ttl, time.Minute))
	defer sweep.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case e := <-c.changed:
			c.mu.Lock()
			live := c.m[e.key] == e
			c.mu.Unlock()
			if !live || !e.stale.Load() {
				continue
			}
			e.mu.Lock()
			if e.stale.Load() && e.client != nil {
				_, _ = c.refresh(c.ctx, e) // a failure leaves it stale: the next Tools tries again
			}
			e.mu.Unlock()
		case <-sweep.C:
			c.sweep()
		}
	}
}

func (c *Cache) sweep() {
	now := c.now()
	var idle []*entry
	c.mu.Lock()
	for k, e := range c.m {
		if e.inUse.Load() == 0 && now.Sub(e.used) >= c.ttl {
			delete(c.m, k)
			idle = append(idle, e)
		}
	}
	c.mu.Unlock()
	for _, e := range idle {
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
}
