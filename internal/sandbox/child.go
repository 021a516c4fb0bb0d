package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// childEnvVar marks a process as a sandbox child. Its value carries the
// pool's limits (see childSpec). The parent sets it in the child's
// otherwise empty environment; nothing else should.
const childEnvVar = "AGENTFLEET_SANDBOX_CHILD_V1"

// The child hook. Every binary that imports this package - the worker,
// agentctl, every test binary - can be re-executed as a sandbox process:
// when the marker is present, this init serves the parent over fds 3 and
// 4 and exits, and main (or the test runner) never runs. Packages
// initialized before this one (its dependencies, and unrelated packages
// earlier in the init order) have run their init functions; they must not
// need anything a child lacks (environment, files, network).
func init() {
	spec, ok := os.LookupEnv(childEnvVar)
	if !ok {
		return
	}
	os.Exit(childMain(spec))
}

// childTestGlobals, when set, adds globals to every runtime a sandbox
// process builds. Only a test file of this package sets it (from a
// package-level initializer, which runs before the child hook above), to
// give its scripts Go code that probes the confinement from inside a
// real sandbox process; in any other binary it is nil, and no script or
// request can set it.
var childTestGlobals func(vm *goja.Runtime)

// Child exit codes, for the parent's logs.
const (
	exitOK       = 0 // the parent closed the request pipe
	exitSetup    = 3 // bad spec or limits could not be applied
	exitProtocol = 4 // the parent sent something unreadable
)

// childSpec is what a sandbox process needs to know for its whole life:
// the pool's limits. It travels in the marker variable, so that a turn's
// request carries only the turn.
type childSpec struct {
	procs    int
	memory   int64
	cpu      time.Duration
	wall     time.Duration
	logBytes int
	carry    int
	// layers is layerAll unless a test binary asks for fewer ("confine"
	// is refused in any other binary).
	layers confineLayers
}

func (s childSpec) String() string {
	return fmt.Sprintf("procs=%d;mem=%d;cpu=%d;wall=%d;log=%d;carry=%d", s.procs, s.memory, int64(s.cpu), int64(s.wall), s.logBytes, s.carry)
}

func parseChildSpec(v string) (childSpec, error) {
	s := childSpec{layers: layerAll}
	for _, kv := range strings.Split(v, ";") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("bad field %q", kv)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n <= 0 {
			return s, fmt.Errorf("bad value for %s: %q", k, val)
		}
		switch k {
		case "procs":
			s.procs = int(n)
		case "mem":
			s.memory = n
		case "cpu":
			s.cpu = time.Duration(n)
		case "wall":
			s.wall = time.Duration(n)
		case "log":
			s.logBytes = int(n)
		case "carry":
			s.carry = int(n)
		case "confine":
			if childTestGlobals == nil || n > int64(layerAll) {
				return s, fmt.Errorf("bad field %q: only a test binary may choose the confinement", kv)
			}
			s.layers = confineLayers(n)
		}
	}
	if s.procs == 0 || s.memory == 0 || s.cpu == 0 || s.wall == 0 || s.logBytes == 0 || s.carry == 0 {
		return s, fmt.Errorf("incomplete spec %q", v)
	}
	return s, nil
}

func (s childSpec) limits() Limits {
	return Limits{CPUTime: s.cpu, TurnTimeout: s.wall, MemoryBytes: s.memory, LogBytes: s.logBytes, CarryBytes: s.carry}
}

// maxFrame bounds any frame either side accepts; the real bounds are the
// limits (carry, log, fetch size), this only stops a corrupt length from
// allocating gigabytes.
func maxFrame(carry int) int { return 64<<20 + 4*carry }

func childMain(specStr string) int {
	spec, err := parseChildSpec(specStr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox child: %v\n", err)
		return exitSetup
	}
	runtime.GOMAXPROCS(spec.procs)
	// JavaScript recursion is bounded by maxCallStack; this bounds what
	// native code between JS frames (a callback of Array.map calling
	// itself) adds to the goroutine stack, so a runaway fails as a stack
	// overflow rather than by exhausting the address space.
	debug.SetMaxStack(128 << 20)
	// Let the GC work to stay under the turn's bound, so garbage does not
	// count against a script; see watchHeap. Under that limit a lazier GC
	// is safe, and turns allocate a lot of short-lived garbage (a fresh
	// runtime each): collect at 4x the live heap rather than 2x.
	debug.SetMemoryLimit(spec.memory)
	debug.SetGCPercent(400)
	if err := limitAddressSpace(spec.memory); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox child: %v\n", err)
		return exitSetup
	}
	// After limitAddressSpace, which reads /proc: from here on the
	// process opens next to nothing.
	if err := limitResources(); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox child: %v\n", err)
		return exitSetup
	}
	in, out, cancels := os.NewFile(3, "sandbox-requests"), os.NewFile(4, "sandbox-replies"), os.NewFile(5, "sandbox-cancels")
	if in == nil || out == nil || cancels == nil {
		fmt.Fprintln(os.Stderr, "sandbox child: fds 3, 4 and 5 are not open; a sandbox process is started by sandbox.Pool")
		return exitSetup
	}
	// Last: from here on the process can open nothing, so everything it
	// opens at start is open by now.
	confined, err := confine(spec.layers)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox child: %v\n", err)
		return exitSetup
	}
	requests := &requestPipe{f: in, fd: in.Fd()}
	s := &childServer{
		confined: confined,
		spec:     spec,
		limits:   spec.limits(),
		requests: requests,
		in:       bufio.NewReaderSize(requests, 64<<10),
		out:      out,
		heap:     newHeapSamples(),
	}
	go s.cancelLoop(bufio.NewReaderSize(cancels, 64))
	return s.serve()
}

// childServer runs turns one at a time on its main goroutine, which also
// does all reading of requests and host replies and all writing, with
// blocking system calls: a request wakes the very thread that will run
// it, with no goroutine hand-off on the way (and, between turns, without
// giving up its P: see requestPipe). Cancels come on a pipe of
// their own, read by cancelLoop, so they reach a turn that is busy in
// JavaScript.
type childServer struct {
	spec     childSpec
	confined confinement
	limits   Limits
	requests *requestPipe
	in       *bufio.Reader
	out      *os.File
	rbuf     []byte
	enc      encoder
	// cur is the turn in progress. cancelled holds the latest cancel as
	// seq<<8 | reason, for a cancel that arrives before its turn starts.
	cur       atomic.Pointer[turnCtl]
	cancelled atomic.Uint64
	spare     *jsEnv
	logs      logBuffer
	heap      []metrics.Sample
}

func (s *childServer) serve() int {
	s.enc.start(frameHello)
	s.enc.uint(protoVersion)
	s.enc.uint(uint64(os.Getpid()))
	s.enc.uint(uint64(processCPU()))
	// What confines the process, for the parent's log and the tests.
	s.enc.uint(uint64(s.confined.landlock))
	if s.confined.seccomp {
		s.enc.byte(1)
	} else {
		s.enc.byte(0)
	}
	s.enc.str(s.confined.note)
	s.write(s.enc.frame())
	s.spare = s.newEnv()
	max := maxFrame(s.spec.carry)
	for {
		s.requests.idle = true
		typ, p, err := readFrame(s.in, &s.rbuf, max)
		s.requests.idle = false
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The parent closed the pipe: the pool is closing or
				// discarding this process.
				return exitOK
			}
			fmt.Fprintf(os.Stderr, "sandbox child: read request: %v\n", err)
			return exitProtocol
		}
		if typ != frameExec {
			fmt.Fprintf(os.Stderr, "sandbox child: expected a request, got frame %q\n", typ)
			return exitProtocol
		}
		m, err := decodeExec(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandbox child: %v\n", err)
			return exitProtocol
		}
		ctl := &turnCtl{seq: m.seq}
		s.cur.Store(ctl)
		if c := s.cancelled.Load(); c>>8 == m.seq {
			ctl.stop(stopReason(c & 0xff))
		}
		res := s.runTurn(ctl, &m)
		s.cur.Store(nil)
		s.write(encodeResult(&s.enc, &res))
		if stopReason(ctl.reason.Load()) == stopMemory {
			// Give the memory back before the next turn rather than let
			// it count against it.
			runtime.GC()
			debug.FreeOSMemory()
		}
		// Build the next turn's runtime now: between turns there is
		// usually time to spare (the model is thinking).
		s.spare = s.newEnv()
	}
}

// requestPipe reads the request pipe: frames from the parent. While idle
// (waiting for the next turn) it reads with idleRead, which on Linux
// blocks in the kernel without telling the Go scheduler.
//
// Why: with one P, a normal blocking read leaves the P in a system call,
// and the runtime's monitor thread (sysmon) takes it back 20µs later and
// hands it to another thread, which finds nothing to do and sleeps; every
// such take keeps the monitor polling every 20µs for the next
// millisecond. Measured with perf (sched:sched_switch) on a sandbox
// process in the production bench, that was about half of the process's
// context switches: four sleeps of the monitor and two of the spare
// threads per turn. While idle there is nothing else for the P to do:
// the cancel reader only matters during a turn, no timer is armed
// between turns, and a GC cycle that is under way simply resumes with
// the next turn. During a turn (host replies) reads are normal, so the
// heap watcher, the CPU timer and cancels keep running.
type requestPipe struct {
	f    *os.File
	fd   uintptr
	idle bool
}

func (p *requestPipe) Read(b []byte) (int, error) {
	if p.idle {
		return idleRead(p.f, p.fd, b)
	}
	return p.f.Read(b)
}

// write writes one frame. A failed write means the parent is gone.
func (s *childServer) write(frame []byte) {
	if _, err := s.out.Write(frame); err != nil {
		os.Exit(exitOK)
	}
}

// readHostReply reads the reply to the host call just sent.
func (s *childServer) readHostReply(seq uint64) (status byte, data []byte) {
	typ, p, err := readFrame(s.in, &s.rbuf, maxFrame(s.spec.carry))
	if err != nil {
		if errors.Is(err, io.EOF) {
			os.Exit(exitOK)
		}
		fmt.Fprintf(os.Stderr, "sandbox child: read host reply: %v\n", err)
		os.Exit(exitProtocol)
	}
	d := decoder{b: p}
	rseq, status := d.uint(), d.byte()
	data = append([]byte(nil), d.bytes()...)
	if typ != frameHostRep || d.err != nil || rseq != seq {
		fmt.Fprintf(os.Stderr, "sandbox child: bad host reply (frame %q, turn %d, want %d, %v)\n", typ, rseq, seq, d.err)
		os.Exit(exitProtocol)
	}
	return status, data
}

// cancelLoop applies cancel frames. It ends when the parent closes the
// pipe (the process is about to exit anyway).
func (s *childServer) cancelLoop(r *bufio.Reader) {
	var buf []byte
	for {
		typ, p, err := readFrame(r, &buf, 64)
		if err != nil {
			return
		}
		d := decoder{b: p}
		seq, reason := d.uint(), d.byte()
		if typ != frameCancel || d.err != nil {
			continue
		}
		s.cancelled.Store(seq<<8 | uint64(reason))
		if t := s.cur.Load(); t != nil && t.seq == seq {
			t.stop(stopReason(reason))
		}
	}
}

// stopReason says why a turn was interrupted. It is also the interrupt
// value given to goja and the reason byte of a cancel frame.
type stopReason int32

const (
	stopNone      stopReason = iota
	stopAnswered             // answer() was called
	stopTimeout              // CPU time exceeded (child timer)
	stopMemory               // heap bound exceeded (child watcher)
	stopCancelled            // the parent's context was cancelled
	stopWallTime             // the parent's turn timeout passed
	stopLimit                // answer() got too large a value
	stopParked               // a host call waits for an approval
)

// turnCtl is the part of a turn other goroutines touch: the reader (on a
// cancel), the CPU timer and the heap watcher. The first stop wins.
type turnCtl struct {
	seq    uint64
	reason atomic.Int32
	vm     atomic.Pointer[goja.Runtime]
}

func (t *turnCtl) stop(r stopReason) {
	if t.reason.CompareAndSwap(0, int32(r)) {
		if vm := t.vm.Load(); vm != nil {
			vm.Interrupt(r)
		}
	}
}

// attach publishes the runtime to stoppers; a stop that came first is
// applied now.
func (t *turnCtl) attach(vm *goja.Runtime) {
	t.vm.Store(vm)
	if r := t.reason.Load(); r != 0 {
		vm.Interrupt(stopReason(r))
	}
}

// heapPeriod is how often the heap watcher samples during a turn: often
// enough that a growing array is stopped within a few MiB of the bound.
const heapPeriod = 2 * time.Millisecond

// Heap metrics the watcher reads, by index in childServer.heap.
const (
	heapObjects = iota // live and not yet swept objects, now
	heapLive           // live heap as of the last completed GC
	gcCycles           // completed GC cycles
)

var heapMetrics = []string{
	heapObjects: "/memory/classes/heap/objects:bytes",
	heapLive:    "/gc/heap/live:bytes",
	gcCycles:    "/gc/cycles/total:gc-cycles",
}

func newHeapSamples() []metrics.Sample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	return s
}

// watchHeap starts the turn's heap watcher; the returned func stops it
// and waits out a sample in progress.
//
// The GC is told to keep the process under the bound (SetMemoryLimit), so
// garbage does not count against a script. A script whose live data nears
// the bound makes the GC run back to back, which would slow it to a crawl
// long before the heap itself passed the bound; so the watcher stops the
// turn when the heap passes the bound, or when a collection during this
// turn found live data above 7/8 of it.
func (s *childServer) watchHeap(ctl *turnCtl) (stop func()) {
	w := &heapWatch{s: s, ctl: ctl, cycles: -1}
	w.mu.Lock()
	w.t = time.AfterFunc(heapPeriod, w.sample)
	w.mu.Unlock()
	return w.stop
}

type heapWatch struct {
	s      *childServer
	ctl    *turnCtl
	mu     sync.Mutex
	t      *time.Timer
	done   bool
	cycles int64 // GC cycles at the first sample; -1 before it
}

func (w *heapWatch) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	h := w.s.heap
	metrics.Read(h)
	bound := uint64(w.s.spec.memory)
	cycles := int64(h[gcCycles].Value.Uint64())
	if w.cycles < 0 {
		w.cycles = cycles
	}
	// The live figure is trusted only if it was measured during this
	// turn: an earlier turn's data is garbage now.
	over := func() bool {
		return h[heapObjects].Value.Uint64() > bound || (cycles > w.cycles && h[heapLive].Value.Uint64() > bound/8*7)
	}
	// On a busy machine the GC lags a script that makes garbage fast,
	// and counts what is allocated while it marks as live: the figures
	// can pass the bound with little live data. Before stopping a turn,
	// collect (twice: the second cycle frees what the first had to keep)
	// and look again. A script that really holds the memory is over the
	// bound after that too; the address-space limit covers the time it
	// takes.
	for i := 0; i < 2 && over(); i++ {
		runtime.GC()
		metrics.Read(h)
		cycles = int64(h[gcCycles].Value.Uint64())
	}
	if over() {
		w.ctl.stop(stopMemory)
		return
	}
	w.t.Reset(heapPeriod)
}
func (w *heapWatch) stop() {
	w.mu.Lock()
	w.done = true
	w.t.Stop()
	w.mu.Unlock()
}
