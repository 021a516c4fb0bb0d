package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/procstat"
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
	cfg    Config
	exe    string
	spec   string // the child's limits, in its marker variable
	guard  *egress.Guard
	client *http.Client
	decls  string // declarations of the default set

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
	g := egress.New(egress.Config{Allow: cfg.Network.Allow, AllowHosts: cfg.Network.AllowHosts, Resolver: cfg.Network.Resolver})
	p := &Pool{
		cfg:     cfg,
		exe:     exe,
		spec:    spec.String(),
		guard:   g,
		client:  g.HTTPClient(cfg.Network.MaxRedirects),
		procs:   make(chan struct{}, cfg.MaxProcesses),
		compute: make(chan struct{}, cfg.PoolSize),
		done:    make(chan struct{}),
		live:    map[*child]struct{}{},
	}
	p.decls = declarations(1<<numPrims-1, cfg.Limits)
	return p, nil
}

// Declarations returns the TypeScript declarations of the given primitives
// (nil: the default set) and of the always-present core (log, console,
// answer, assert, help), with a line stating the limits: the part of the
// system prompt that tells the model what its scripts can call. Unknown
// names are ignored; CheckPrimitives reports them.
func (p *Pool) Declarations(primitives []string) string {
	if primitives == nil {
		return p.decls
	}
	s := coreSet
	for _, n := range primitives {
		if pr, ok := primByName[n]; ok {
			s |= 1 << pr
		}
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

	c, err := p.acquire()
	if err != nil {
		return agentfleet.ExecResult{}, err
	}
	res, reusable, err := p.run(ctx, c, &req, set, &computing)
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

// acquire takes the most recently used idle process, or starts one.
func (p *Pool) acquire() (*child, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.startChild()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.destroy()
		return nil, ErrClosed
	}
	p.live[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
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
		p.mu.Unlock()
		return
	}
	delete(p.live, c)
	p.mu.Unlock()
	c.destroy()
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
	}
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
	p.client.CloseIdleConnections()
	return nil
}

// child is the parent's handle on one sandbox process.
type child struct {
	cmd    *exec.Cmd
	w      *os.File      // requests and host replies: the child's fd 3
	rf     *os.File      // results and host calls: the child's fd 4
	ctl    *os.File      // cancels: the child's fd 5
	r      *bufio.Reader // over rf
	stderr *headBuffer
	rbuf   []byte
	seq    uint64
	enc    encoder // request frames, used by the goroutine running the turn
	// cpuMark is the process's CPU time at its hello or its last
	// result: where the next turn's CPU time is counted from.
	cpuMark time.Duration

	idleSince time.Time // when it last went idle; guarded by Pool.mu

	// killed is set when the parent kills the process, so that its
	// SIGKILL is not mistaken for the kernel's OOM killer.
	killed   atomic.Bool
	waitOnce sync.Once
	waitErr  error
}

func (p *Pool) startChild() (*child, error) {
	var files []*os.File // all pipe ends, closed on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	newPipe := func() (r, w *os.File, err error) {
		r, w, err = pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	reqR, reqW, err := newPipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: start process: %w", err)
	}
	repR, repW, err := newPipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("sandbox: start process: %w", err)
	}
	ctlR, ctlW, err := newPipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("sandbox: start process: %w", err)
	}
	cmd := exec.Command(p.exe)
	// The child gets no environment but its marker and no working
	// directory worth having: scripts cannot reach either, and neither
	// can a bug in a primitive.
	cmd.Env = []string{childEnvVar + "=" + p.spec}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{reqR, repW, ctlR} // fds 3, 4, 5
	stderr := &headBuffer{max: 8 << 10}
	cmd.Stderr = stderr
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("sandbox: start process %s: %w", p.exe, err)
	}
	// The child holds its ends; closing ours makes EOF mean "the child
	// exited".
	reqR.Close()
	repW.Close()
	ctlR.Close()
	c := &child{cmd: cmd, w: reqW, rf: repR, ctl: ctlW, r: bufio.NewReaderSize(repR, 64<<10), stderr: stderr}

	// Reads block in the kernel, so the handshake deadline kills the
	// process rather than setting a read deadline.
	timer := time.AfterFunc(startTimeout, c.kill)
	typ, payload, err := readFrame(c.r, &c.rbuf, 1<<10)
	timedOut := !timer.Stop()
	if err == nil && typ != frameHello {
		err = fmt.Errorf("%w: expected hello, got frame %q", errProtocol, typ)
	}
	if err == nil {
		d := decoder{b: payload}
		if v := d.uint(); d.err != nil || v != protoVersion {
			err = fmt.Errorf("%w: child speaks version %d, want %d", errProtocol, v, protoVersion)
		}
		_ = d.uint() // pid
		c.cpuMark = time.Duration(d.uint())
		if err == nil && d.err != nil {
			err = fmt.Errorf("hello: %w", d.err)
		}
	}
	if err != nil {
		c.destroy()
		if timedOut {
			err = fmt.Errorf("no handshake within %s", startTimeout)
		}
		return nil, fmt.Errorf("sandbox: start process %s: %v (%s); the binary must import the sandbox package so that its init can serve as a sandbox process: %s",
			p.exe, err, exitDescription(c.waitErr), firstLines(strings.TrimSpace(stderr.String()), 12))
	}
	return c, nil
}

// write sends one frame on the request pipe. Only the goroutine running
// the turn writes there.
func (c *child) write(frame []byte) error {
	_, err := c.w.Write(frame)
	return err
}

func (c *child) kill() {
	c.killed.Store(true)
	// Kill after the process was reaped returns ErrProcessDone; ignore.
	_ = c.cmd.Process.Kill()
}

// destroy kills and reaps the process and closes the pipes.
func (c *child) destroy() {
	c.kill()
	c.wait()
	c.w.Close()
	c.rf.Close()
	c.ctl.Close()
}

func (c *child) wait() {
	c.waitOnce.Do(func() { c.waitErr = c.cmd.Wait() })
}

// run executes one turn on c. reusable is false when c must not serve
// again (it died, was killed, or broke the protocol).
//
// computing is whether the turn holds a compute token; run gives it back
// for each host call and takes it again after, and clears computing when
// the turn ended (cancelled, or the pool closed) before it got it back.
func (p *Pool) run(ctx context.Context, c *child, req *agentfleet.ExecRequest, set primSet, computing *bool) (res agentfleet.ExecResult, reusable bool, err error) {
	lim := p.cfg.Limits
	turnCtx, cancel := context.WithTimeoutCause(ctx, lim.TurnTimeout, errWallTime)
	defer cancel()

	c.seq++
	seq := c.seq
	msg := execMsg{seq: seq, prims: set, script: req.Script, args: req.Args, secrets: req.Secrets}
	frame := encodeExec(&c.enc, &msg)
	if len(frame) > maxFrame(lim.CarryBytes) {
		// The process would refuse the frame; say why instead.
		res.Return = []byte("null")
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptLimit, Message: fmt.Sprintf(
			"the script and its args take %s; the limit is %s", formatBytes(int64(len(frame))), formatBytes(int64(maxFrame(lim.CarryBytes))))}
		return res, true, nil
	}
	if err := c.write(frame); err != nil {
		return p.died(c, stopNone, fmt.Errorf("write request: %w", err), &res)
	}

	w := startWatch(c, seq, lim.CPUTime+killGrace)
	stopCancel := context.AfterFunc(turnCtx, func() {
		reason := stopCancelled
		if context.Cause(turnCtx) == errWallTime {
			reason = stopWallTime
		}
		w.cancel(reason)
	})
	defer stopCancel()

	max := maxFrame(lim.CarryBytes)
	for {
		typ, payload, err := readFrame(c.r, &c.rbuf, max)
		if err != nil {
			return p.died(c, w.finish(), err, &res)
		}
		switch typ {
		case frameHostCall:
			w.pause()
			if *computing { // not after a take below failed
				<-p.compute
				*computing = false
			}
			hseq, status, data := p.hostCall(turnCtx, req, set, payload, &res.AIUsage)
			// Without the token again, the script goes on only to be
			// stopped: its turn was cancelled or the pool is closing.
			*computing = p.take(turnCtx, p.compute) == nil
			w.resume()
			if hseq != seq {
				w.finish()
				return p.broken(c, fmt.Errorf("%w: host call for turn %d during turn %d", errProtocol, hseq, seq), &res)
			}
			// A failed write shows up as EOF on the next read.
			e := &c.enc
			e.start(frameHostRep)
			e.uint(seq)
			e.byte(status)
			e.bytes(data)
			_ = c.write(e.frame())
		case frameResult:
			killed := w.finish()
			m, err := decodeResult(payload)
			if err == nil && m.seq != seq {
				err = fmt.Errorf("%w: result for turn %d during turn %d", errProtocol, m.seq, seq)
			}
			if err != nil {
				return p.broken(c, err, &res)
			}
			c.cpuMark = m.cpu
			fillResult(&res, &m)
			if turnCtx.Err() != nil && (res.Err == nil || res.Err.Kind != agentfleet.ScriptTimeout) {
				// The turn was cancelled (or ran out of wall time) but
				// finished before the cancel reached it, typically
				// because a host call failed on the cancelled context
				// and the script went on. Whatever it produced then is
				// not a result: report the cancellation.
				reason := stopCancelled
				if context.Cause(turnCtx) == errWallTime {
					reason = stopWallTime
				}
				res.Answered, res.Answer, res.Return = false, nil, []byte("null")
				res.Err = p.stopError(reason, true)
			}
			return res, killed == stopNone, nil
		default:
			w.finish()
			return p.broken(c, fmt.Errorf("%w: unexpected frame %q", errProtocol, typ), &res)
		}
	}
}

func fillResult(res *agentfleet.ExecResult, m *resultMsg) {
	res.Answered = m.answered
	if m.answered {
		res.Answer = m.answer
	}
	res.Return = m.ret
	if len(res.Return) == 0 {
		res.Return = []byte("null")
	}
	res.Logs = m.logs
	if m.errKind != 0 {
		res.Err = &agentfleet.ScriptError{Kind: kindFromCode(m.errKind), Message: m.errMsg}
	}
}

// broken discards a child that broke the protocol.
func (p *Pool) broken(c *child, err error, res *agentfleet.ExecResult) (agentfleet.ExecResult, bool, error) {
	c.kill()
	return p.died(c, stopNone, err, res)
}

// died reports a turn whose process is gone: killed by us (killed says
// why), out of memory, or crashed. The process is reaped here.
func (p *Pool) died(c *child, killed stopReason, cause error, res *agentfleet.ExecResult) (agentfleet.ExecResult, bool, error) {
	byParent := c.killed.Load() // before the kill below, which only makes sure
	c.kill()
	c.wait()
	if p.isClosed() {
		return *res, false, ErrClosed
	}
	res.Return = []byte("null")
	stderr := strings.TrimSpace(c.stderr.String())
	exit := exitDescription(c.waitErr)
	switch {
	case killed != stopNone:
		res.Err = p.stopError(killed, false)
	case oomExit(c.waitErr, stderr, byParent):
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptMemory, Message: fmt.Sprintf(
			"the script exceeded the memory limit of %s (an allocation too large to satisfy) and its sandbox process was terminated; hold less data at once",
			formatBytes(p.cfg.Limits.MemoryBytes))}
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptLimit, Message: "the script recursed too deeply and its sandbox process was terminated; use a loop instead of deep recursion"}
	default:
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptException, Message: fmt.Sprintf("sandbox process crashed (%s); the turn did not complete", exit)}
	}
	p.cfg.Logger.Warn("sandbox process ended during a turn",
		"pid", c.cmd.Process.Pid, "kind", res.Err.Kind, "exit", exit, "cause", cause, "stderr", firstLines(stderr, 12))
	return *res, false, nil
}

// stopError is the error of a turn the parent stopped. cooperative is
// false when the process had to be killed because it did not stop.
func (p *Pool) stopError(r stopReason, cooperative bool) *agentfleet.ScriptError {
	l := p.cfg.Limits
	switch r {
	case stopCancelled:
		return &agentfleet.ScriptError{Kind: agentfleet.ScriptCancelled, Message: "the execution was cancelled"}
	case stopWallTime:
		return &agentfleet.ScriptError{Kind: agentfleet.ScriptTimeout, Message: fmt.Sprintf("the turn exceeded its wall-clock time limit of %s (including fetch and ai calls) and was stopped", shortDuration(l.TurnTimeout))}
	}
	msg := fmt.Sprintf("the script used its CPU time limit of %s and was stopped", shortDuration(l.CPUTime))
	if !cooperative {
		msg = fmt.Sprintf("the script did not stop at its CPU time limit of %s (stuck in a long built-in call, such as sorting or filling a huge array) and its sandbox process was killed", shortDuration(l.CPUTime))
	}
	return &agentfleet.ScriptError{Kind: agentfleet.ScriptTimeout, Message: msg}
}

// oomMarks are how the Go runtime says it could not map memory: the
// fatal error under RLIMIT_AS, and its race-mode variant.
var oomMarks = []string{"out of memory", "cannot allocate memory", "too many address space collisions"}

// oomExit recognizes a process that died for lack of memory: the Go
// runtime's fatal error under RLIMIT_AS, or a SIGKILL the parent did not
// send (the kernel's OOM killer).
func oomExit(waitErr error, stderr string, killedByParent bool) bool {
	for _, m := range oomMarks {
		if strings.Contains(stderr, m) {
			return true
		}
	}
	var ee *exec.ExitError
	if !killedByParent && errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	return false
}

func exitDescription(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}

// turnWatch is the parent's hard deadline on a turn: if the child has not
// reported once it has used its CPU time plus a grace, or within a grace
// after a cancel, the process is killed. It never fires for a child that
// interrupts itself in time.
//
// The budget is the child's CPU time, which the parent reads from /proc
// (procstat). A timer sleeps for the budget left in wall time (the
// clock stopped during host calls, when the child waits); when it fires
// and the child, on a busy machine, has used less CPU than that, the
// timer sleeps again for the rest. Where /proc cannot be read the
// budget is that wall time. After a cancel the grace is wall time: the
// turn must end. (A child that neither computes nor reports, which only
// a bug would make, is ended that way too: by the turn's wall-clock
// timeout and its grace.)
type turnWatch struct {
	c   *child
	seq uint64

	mu       sync.Mutex
	timer    *time.Timer
	gen      int           // invalidates callbacks of superseded timers
	budget   time.Duration // CPU time the turn may use, grace included
	left     time.Duration // budget left when the current segment began
	segStart time.Time
	paused   bool
	done     bool
	killed   stopReason // why the watch killed the process
	stopped  stopReason // why the turn was cancelled, if it was
}

func startWatch(c *child, seq uint64, budget time.Duration) *turnWatch {
	w := &turnWatch{c: c, seq: seq, budget: budget, left: budget}
	w.mu.Lock()
	w.arm()
	w.mu.Unlock()
	return w
}

// arm starts a timer for the budget left; w.mu held.
func (w *turnWatch) arm() {
	w.gen++
	gen := w.gen
	w.segStart = time.Now()
	w.timer = time.AfterFunc(w.left, func() { w.fire(gen) })
}

func (w *turnWatch) disarm() {
	w.gen++
	w.timer.Stop()
	w.left -= time.Since(w.segStart)
}

func (w *turnWatch) fire(gen int) {
	w.mu.Lock()
	if w.done || w.paused || gen != w.gen {
		w.mu.Unlock()
		return
	}
	if w.stopped == stopNone {
		if left := w.cpuLeft(); left > 0 {
			w.left = max(left, minCPUCheck)
			w.arm()
			w.mu.Unlock()
			return
		}
	}
	w.killed = stopTimeout
	if w.stopped != stopNone {
		w.killed = w.stopped
	}
	w.done = true
	w.mu.Unlock()
	w.c.kill()
}

// cpuLeft is the CPU time the child may still use this turn; zero when
// it cannot be read (the process is gone, or there is no /proc).
func (w *turnWatch) cpuLeft() time.Duration {
	st, ok := procstat.Read(w.c.cmd.Process.Pid)
	if !ok {
		return 0
	}
	return w.budget - (st.CPU - w.c.cpuMark)
}

func (w *turnWatch) pause() {
	w.mu.Lock()
	if !w.done && !w.paused {
		w.paused = true
		w.disarm()
	}
	w.mu.Unlock()
}

func (w *turnWatch) resume() {
	w.mu.Lock()
	if !w.done && w.paused {
		w.paused = false
		w.arm()
	}
	w.mu.Unlock()
}

// cancel asks the child to stop and shortens the deadline to the grace.
func (w *turnWatch) cancel(r stopReason) {
	w.mu.Lock()
	if w.done || w.stopped != stopNone {
		w.mu.Unlock()
		return
	}
	w.stopped = r
	if w.paused {
		w.left = min(w.left, killGrace)
	} else {
		w.disarm()
		w.left = min(w.left, killGrace)
		w.arm()
	}
	// Written under w.mu: once finish returns, no cancel for this turn
	// can reach the child, so it cannot hit the next turn. (The child
	// also checks the sequence number.)
	var e encoder
	e.start(frameCancel)
	e.uint(w.seq)
	e.byte(byte(r))
	_, _ = w.c.ctl.Write(e.frame())
	w.mu.Unlock()
}

// finish ends the watch and says whether (and why) it killed the process.
func (w *turnWatch) finish() stopReason {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		w.gen++
		w.timer.Stop()
	}
	return w.killed
}

// headBuffer keeps the first max bytes written to it: the line that says
// why a Go process died ("fatal error: runtime: out of memory") comes
// first, the goroutine dump after it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.max - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

var _ io.Writer = (*headBuffer)(nil)

// firstLines keeps the first n lines of s: enough of a Go crash to see
// the error and the crashing goroutine.
func firstLines(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return s
		}
		i += j + 1
	}
	return s[:i]
}
