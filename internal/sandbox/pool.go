package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/mcp"
)

// ErrClosed is returned by Execute once the pool is closed.
var ErrClosed = errors.New("sandbox: pool closed")

// errWallTime is the cause of a turn context that hit Limits.TurnTimeout.
var errWallTime = errors.New("sandbox: turn wall-clock limit")

// Pool runs scripts in a pool of sandbox processes. It is safe for
// concurrent use. Up to PoolSize scripts run JavaScript at once; a script
// waiting on a host call gives up its place meanwhile but keeps its
// process, so up to MaxProcesses turns are in an Execute at once.
type Pool struct {
	cfg  Config
	exe  string
	spec string // the child's limits, in its marker variable
	// base is the net of turns whose agent adds no egress; egress
	// holds the others' (egress.go).
	base   guardedNet
	egress egressNets
	decls  string // declarations of the default set
	red    atomic.Pointer[redactorEntry]
	spawn  *spawner
	mcp    *mcp.Cache

	// procs holds one token per Execute that has or will get a process:
	// at most MaxProcesses. compute holds one per script running
	// JavaScript: at most PoolSize. An Execute takes procs, then
	// compute, and only then a process, so processes beyond PoolSize are
	// started only while others wait in host calls; it gives compute
	// back for each host call and takes it again after, while procs,
	// held throughout, is never waited for by a holder of compute.
	procs   chan struct{}
	compute chan struct{}
	done    chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	// idle holds started processes between turns, the most recently
	// used last: a turn takes the process that ran the turn before,
	// whose thread, caches and heap are warm, and under light load the
	// others stay asleep instead of each being woken in turn. A process
	// goes back to idle before its procs token is released, so live
	// processes never exceed MaxProcesses. Beyond PoolSize, idle ones
	// are stopped after IdleTimeout, least recently used first, by
	// trimIdle on the trim timer.
	idle     []*child
	live     map[*child]struct{}
	trim     *time.Timer // pending trimIdle, nil when none
	inflight sync.WaitGroup

	// Memory accounting (memory.go): each process from its start until
	// it is reaped is charged perProcess; charged never passes
	// memTotal (negative: no bound). Executes that found neither an
	// idle process nor room wait for room to close, which is replaced
	// each time a process goes idle or is reaped while roomWaiters > 0.
	perProcess  int64
	memTotal    int64
	charged     int64
	room        chan struct{}
	roomWaiters int
}

// New validates cfg and returns a pool. Sandbox processes are started
// lazily, on the first Execute that finds none idle, and then kept for
// later turns; New itself starts none, so a pool that is never used costs
// nothing.
func New(cfg Config) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	exe := cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("sandbox: find own executable to run sandbox processes: %w (set Config.Executable)", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	spec := childSpec{
		procs:    cfg.ChildProcs,
		memory:   cfg.Limits.MemoryBytes,
		cpu:      cfg.Limits.CPUTime,
		wall:     cfg.Limits.TurnTimeout,
		logBytes: cfg.Limits.LogBytes,
		carry:    cfg.Limits.CarryBytes,
	}
	p := &Pool{
		cfg:     cfg,
		exe:     exe,
		spec:    spec.String(),
		procs:   make(chan struct{}, cfg.MaxProcesses),
		compute: make(chan struct{}, cfg.PoolSize),
		done:    make(chan struct{}),
		live:    map[*child]struct{}{},
		spawn:   newSpawner(),

		perProcess: ProcessMemory(cfg.Limits),
		room:       make(chan struct{}),
	}
	g := egress.New(p.guardConfig())
	p.base = guardedNet{guard: g, client: p.httpClient(g)}
	p.memTotal = memoryTotal(cfg.MemoryTotal, p.perProcess, cgroupMemoryLimit)
	p.decls = declarations(defaultSet, cfg.Limits)
	// MCP sessions and tool lists, per agent server (mcprun.go); its
	// goroutine is Close's to stop.
	p.mcp = mcp.NewCache(mcp.CacheConfig{})
	return p, nil
}

// Declarations returns the TypeScript declarations of the given primitives
// (nil: the default set) and of the always-present core (log, console,
// answer, assert, help), with a line stating the limits: the part of the
// system prompt that tells the model what its scripts can call. secret
// adds secret(), for an agent that names a secret exposed to scripts.
// Unknown names are ignored; CheckPrimitives reports them.
func (p *Pool) Declarations(primitives []string, secret bool) string {
	if primitives == nil && !secret {
		return p.decls
	}
	s := coreSet
	if primitives == nil {
		s = defaultSet
	}
	for _, n := range primitives {
		if pr, ok := primByName[n]; ok {
			s |= 1 << pr
		}
	}
	if secret {
		s |= 1 << primSecret
	}
	return declarations(s, p.cfg.Limits)
}

// Execute runs one turn's script. It returns an error only when the
// sandbox itself fails (a process cannot be started, the pool is closed,
// an unknown primitive is requested); whatever the script does - throw,
// loop, allocate, be cancelled, be denied - is reported in the result's
// Err. Execute waits for a free sandbox process, honouring ctx.
func (p *Pool) Execute(ctx context.Context, req agentfleet.ExecRequest) (agentfleet.ExecResult, error) {
	start := time.Now()
	set, err := primSetOf(req.Primitives)
	if err != nil {
		return agentfleet.ExecResult{}, err
	}
	if len(req.Credentials) > 0 {
		set |= 1 << primSecret
	}
	if len(req.OpenAPI) > 0 {
		set |= 1 << primAPI
	}
	if req.Skills != nil {
		set |= skillSet
	}
	var mcpTools string
	if len(req.MCP) > 0 {
		set |= 1 << primMCP
		// Listed before a process is taken, so a slow server holds
		// none; bounded by the turn's timeout.
		wall := p.cfg.Limits.TurnTimeout
		if req.TurnTimeout > 0 && req.TurnTimeout < wall {
			wall = req.TurnTimeout
		}
		lctx, cancel := context.WithTimeout(ctx, wall)
		mcpTools = p.mcpTable(lctx, &req)
		cancel()
	}
	if ctx.Err() != nil {
		return cancelledResult(start), nil
	}
	if err := p.take(ctx, p.procs); err != nil {
		return cancelledOr(start, err)
	}
	defer func() { <-p.procs }()
	if err := p.take(ctx, p.compute); err != nil {
		return cancelledOr(start, err)
	}
	computing := true // false while run waits on a host call
	defer func() {
		if computing {
			<-p.compute
		}
	}()
	if !p.enter() {
		return agentfleet.ExecResult{}, ErrClosed
	}
	defer p.inflight.Done()

	c, err := p.acquire(ctx, &computing)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrClosed) {
			return cancelledResult(start), nil // while waiting for memory
		}
		return agentfleet.ExecResult{}, err
	}
	res, reusable, err := p.run(ctx, c, &req, set, mcpTools, &computing)
	p.release(c, reusable)
	res.Duration = time.Since(start)
	return res, err
}

// take puts a token into sem: ctx's error if ctx ends first, ErrClosed if
// the pool closes.
func (p *Pool) take(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrClosed
	}
}

// cancelledOr is Execute's outcome when take failed with err.
func cancelledOr(start time.Time, err error) (agentfleet.ExecResult, error) {
	if errors.Is(err, ErrClosed) {
		return agentfleet.ExecResult{}, err
	}
	return cancelledResult(start), nil
}

func cancelledResult(start time.Time) agentfleet.ExecResult {
	return agentfleet.ExecResult{
		Return:   []byte("null"),
		Err:      &agentfleet.ScriptError{Kind: agentfleet.ScriptCancelled, Message: "the execution was cancelled before it started"},
		Duration: time.Since(start),
	}
}

// enter registers an Execute unless the pool is closed.
func (p *Pool) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.inflight.Add(1)
	return true
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// acquire takes the most recently used idle process, or starts one if
// the memory bound leaves room for it; else it waits, honouring ctx,
// until a process goes idle or is reaped. While it waits it gives up its
// compute place (*computing), which the turns holding the memory may
// need in order to finish.
func (p *Pool) acquire(ctx context.Context, computing *bool) (*child, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if n := len(p.idle); n > 0 {
			c := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			return c, nil
		}
		if p.memTotal < 0 || p.charged+p.perProcess <= p.memTotal {
			p.charged += p.perProcess
			p.mu.Unlock()
			return p.start()
		}
		p.roomWaiters++
		room := p.room
		p.mu.Unlock()

		if *computing {
			<-p.compute
			*computing = false
		}
		var err error
		select {
		case <-room:
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.done:
			err = ErrClosed
		}
		p.mu.Lock()
		p.roomWaiters--
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if err := p.take(ctx, p.compute); err != nil {
			return nil, err
		}
		*computing = true
	}
}

// start starts a process whose memory acquire has charged.
func (p *Pool) start() (*child, error) {
	c, err := p.startChild()
	if err != nil {
		p.uncharge()
		return nil, startErr(err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.destroy()
		p.uncharge()
		return nil, ErrClosed
	}
	p.live[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// startErr marks a process start that failed for want of the worker's
// own resources (descriptors for its pipes, memory or a process slot for
// the fork) as agentfleet.ErrExhausted: the turn is handed back, not
// failed.
func startErr(err error) error {
	if agentfleet.OutOfDescriptors(err) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EAGAIN) {
		return fmt.Errorf("%w: %w", agentfleet.ErrExhausted, err)
	}
	return err
}

// uncharge gives back the memory of a process that was reaped (or never
// started).
func (p *Pool) uncharge() {
	p.mu.Lock()
	p.charged -= p.perProcess
	p.signalRoom()
	p.mu.Unlock()
}

// signalRoom wakes the Executes waiting for room; p.mu held.
func (p *Pool) signalRoom() {
	if p.roomWaiters > 0 {
		close(p.room)
		p.room = make(chan struct{})
	}
}

// release returns a healthy process to idle, or destroys it.
func (p *Pool) release(c *child, reusable bool) {
	p.mu.Lock()
	if reusable && !p.closed {
		c.idleSince = time.Now()
		p.idle = append(p.idle, c)
		if len(p.idle) > p.cfg.PoolSize && p.trim == nil {
			p.trim = time.AfterFunc(p.cfg.IdleTimeout, p.trimIdle)
		}
		p.signalRoom()
		p.mu.Unlock()
		return
	}
	delete(p.live, c)
	p.mu.Unlock()
	// Its memory counts until it is reaped.
	c.destroy()
	p.uncharge()
}

// trimIdle stops the idle processes beyond PoolSize that have been idle
// for IdleTimeout, least recently used first, and schedules itself again
// while more than PoolSize are idle. A burst of turns waiting on host
// calls starts processes beyond PoolSize; this gives their memory back.
func (p *Pool) trimIdle() {
	p.mu.Lock()
	p.trim = nil
	if p.closed {
		p.mu.Unlock()
		return
	}
	var stale []*child
	now := time.Now()
	for len(p.idle) > p.cfg.PoolSize {
		c := p.idle[0]
		if wait := p.cfg.IdleTimeout - now.Sub(c.idleSince); wait > 0 {
			p.trim = time.AfterFunc(wait, p.trimIdle)
			break
		}
		p.idle = p.idle[1:]
		delete(p.live, c)
		stale = append(stale, c)
	}
	if len(stale) == 0 {
		p.mu.Unlock()
		return
	}
	p.inflight.Add(1) // Close waits for the reaping
	p.mu.Unlock()
	defer p.inflight.Done()
	for _, c := range stale {
		c.destroy()
		p.uncharge()
	}
}

// Memory reports the memory charged to the live sandbox processes and
// the bound on it (negative: none); see Config.MemoryTotal.
func (p *Pool) Memory() (charged, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charged, p.memTotal
}

// Processes reports the started sandbox processes and how many of them
// are idle, waiting for a turn.
func (p *Pool) Processes() (live, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live), len(p.idle)
}

// Close kills every sandbox process, waits for running Executes to return
// (with ErrClosed) and reaps the processes. It is safe to call twice.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	if p.trim != nil {
		p.trim.Stop()
	}
	live := make([]*child, 0, len(p.live))
	for c := range p.live {
		live = append(live, c)
	}
	p.mu.Unlock()

	for _, c := range live {
		c.kill()
	}
	p.inflight.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.destroy()
	}
	p.spawn.stopAndWait()
	p.base.client.CloseIdleConnections()
	_ = p.mcp.Close()
	p.egress.close()
	return nil
}
