package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

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
	// confined is what the process reported confines it.
	confined confinement

	idleSince time.Time // when it last went idle; guarded by Pool.mu

	// killed is set when the parent kills the process, so that its
	// SIGKILL is not mistaken for the kernel's OOM killer.
	killed   atomic.Bool
	waitOnce sync.Once
	waitErr  error
}

// spawner starts the sandbox processes from one OS thread, locked to its
// goroutine, on which prepareSpawnThread set no_new_privs: a process
// inherits the flag from the thread that forks it, so every thread of a
// sandbox process has it from its first instruction (set by the process
// itself, it would hold only for the thread that set it). The thread
// lives until the pool is closed, which also keeps Pdeathsig, tied to
// the forking thread, from firing while the pool runs.
type spawner struct {
	once sync.Once
	reqs chan func()
	err  error         // from prepareSpawnThread; read once done is closed
	stop chan struct{} // closed by stopAndWait
	done chan struct{} // closed when the thread's goroutine has returned
}

func newSpawner() *spawner {
	return &spawner{reqs: make(chan func()), stop: make(chan struct{}), done: make(chan struct{})}
}

// start starts cmd from the spawner's thread; closed aborts the wait
// for the thread (the pool is closing).
func (s *spawner) start(cmd *exec.Cmd, closed <-chan struct{}) error {
	s.once.Do(func() { go s.serve() })
	result := make(chan error, 1)
	select {
	case s.reqs <- func() { result <- cmd.Start() }:
	case <-s.done:
		return s.failure()
	case <-closed:
		return ErrClosed
	}
	return <-result
}

func (s *spawner) failure() error {
	if s.err != nil {
		return s.err
	}
	return ErrClosed
}

func (s *spawner) serve() {
	defer close(s.done)
	// Never unlocked: the thread ends with the goroutine rather than
	// go back to the runtime with no_new_privs set.
	runtime.LockOSThread()
	if s.err = prepareSpawnThread(); s.err != nil {
		s.err = fmt.Errorf("sandbox: prepare the thread that starts sandbox processes: %w", s.err)
		return
	}
	for {
		select {
		case f := <-s.reqs:
			f()
		case <-s.stop:
			return
		}
	}
}

// stopAndWait ends the spawner's thread, if it was started. Only Close
// calls it, once, after every process is reaped.
func (s *spawner) stopAndWait() {
	started := true
	s.once.Do(func() { started = false })
	if !started {
		return
	}
	close(s.stop)
	<-s.done
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
	if err := p.spawn.start(cmd, p.done); err != nil {
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
		c.confined.landlock = int(d.uint())
		c.confined.seccomp = d.byte() == 1
		c.confined.note = d.str()
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
	confinementLog.Do(func() { logConfinement(p.cfg.Logger, c.confined) })
	return c, nil
}

// confinementLog says once per worker process what confines its sandbox
// processes: the kernel does not change while it runs.
var confinementLog sync.Once

func logConfinement(log *slog.Logger, c confinement) {
	switch {
	case c.seccomp && c.landlock > 0:
		log.Info("sandbox processes confined by the kernel", "seccomp", true, "landlock_abi", c.landlock)
	case c.seccomp:
		log.Warn("sandbox processes confined by seccomp only: no Landlock", "seccomp", true, "landlock_abi", 0, "reason", c.note)
	default:
		log.Warn("sandbox processes not confined by the kernel", "reason", c.note)
	}
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
