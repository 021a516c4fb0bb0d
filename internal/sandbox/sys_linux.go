package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// limitAddressSpace caps the child's virtual address space (RLIMIT_AS) at
// what it has mapped now plus room for a turn's heap. It is the backstop
// for the one case the heap watcher cannot stop: a single allocation far
// past the bound ('x'.repeat(2**36)), which the Go runtime cannot satisfy
// and answers with "fatal error: runtime: out of memory". That kills only
// this process; the parent reports the turn as kind memory.
//
// The cap is relative to the current mapping because the baseline varies
// a lot: a race-enabled binary has terabytes of shadow memory reserved.
func limitAddressSpace(memory int64) error {
	base, err := mappedBytes()
	if err != nil {
		return fmt.Errorf("read address space size: %w", err)
	}
	room := addressSpaceRoom(memory)
	if raceEnabled {
		// The race runtime maps shadow memory for every heap arena.
		room *= 6
	}
	lim := uint64(base + room)
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
		return fmt.Errorf("set RLIMIT_AS to %d: %w", lim, err)
	}
	return nil
}

// childMaxFiles is a sandbox process's RLIMIT_NOFILE. It uses about ten
// descriptors: stdio, its three pipes, the runtime's poller and the zone
// file Date reads; a script opens none of its own.
const childMaxFiles = 32

// nprocHeadroom is how many tasks beyond those running on the machine
// when a sandbox process starts its RLIMIT_NPROC allows; see
// limitResources.
const nprocHeadroom = 16384

// limitResources sets the sandbox process's other limits: no core dumps
// (a dump would hold the script's data), few descriptors, a bound on
// processes, and an OOM score that makes the kernel, short of memory,
// kill a sandbox process before the worker. Hard limits are lowered with
// the soft ones, so that a process that runs hostile code cannot raise
// them again.
//
// RLIMIT_NPROC counts every process and thread of the real uid on the
// machine - the worker's, the other sandbox processes', other
// containers' running as that uid - and the Go runtime here starts
// threads as it needs them; a thread the limit refuses is a fatal error
// in the runtime. No limit this process can set is therefore "what it
// needs": it is set once, now, to every task on the machine plus
// nprocHeadroom. Later thread creation, here or anywhere under the uid,
// fails only once that uid alone has started that many more tasks, which
// only a fork bomb does. (Root, as in CI, is not bound by it at all.)
func limitResources() error {
	tasks, err := machineTasks()
	if err != nil {
		return fmt.Errorf("count tasks for RLIMIT_NPROC: %w", err)
	}
	for _, l := range []struct {
		name     string
		resource int
		max      uint64
	}{
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, childMaxFiles},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, tasks + nprocHeadroom},
	} {
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.resource, &cur); err != nil {
			return fmt.Errorf("get %s: %w", l.name, err)
		}
		v := min(l.max, cur.Max) // raising a hard limit takes privileges
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("set %s to %d: %w", l.name, v, err)
		}
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		return fmt.Errorf("raise the OOM score: %w", err)
	}
	return nil
}

// machineTasks is the number of processes and threads on the machine
// (the fourth field of /proc/loadavg, "running/total").
func machineTasks() (uint64, error) {
	f, err := procFields("/proc/loadavg", 4)
	if err != nil {
		return 0, err
	}
	_, total, ok := bytes.Cut(f[3], []byte("/"))
	n, err := strconv.ParseUint(string(total), 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("unexpected /proc/loadavg field %q", f[3])
	}
	return n, nil
}

// procFields reads the space-separated fields of a /proc file that has
// at least n.
func procFields(path string, n int) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := bytes.Fields(b)
	if len(f) < n {
		return nil, fmt.Errorf("unexpected %s: %q", path, b)
	}
	return f, nil
}

// prepareSpawnThread sets no_new_privs on the calling thread, locked to
// its goroutine (see spawner): no process started from it, nor anything
// that process executes, can gain privileges through a set-user-ID
// binary or file capabilities.
func prepareSpawnThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// mappedBytes is the process's current virtual size.
func mappedBytes() (int64, error) {
	f, err := procFields("/proc/self/statm", 1)
	if err != nil {
		return 0, err
	}
	pages, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// childSysProcAttr makes the kernel kill a sandbox process whose parent
// dies, so no child outlives a crashed worker (it would also exit on the
// closed pipe, but a child stuck in a loop reads no pipe).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pipe returns a pipe in blocking mode. The parent reads replies with
// blocking system calls rather than through the netpoller: the thread
// waiting for a turn's result is woken directly by the kernel, which
// takes tens of microseconds off every round trip. An Execute in
// progress holds one thread while it waits; there are at most
// MaxProcesses of them.
func pipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sandbox-pipe-r"), os.NewFile(uintptr(fds[1]), "sandbox-pipe-w"), nil
}

// idleRead is read(2) on the blocking pipe fd through RawSyscall: the
// calling goroutine keeps its P while blocked (see requestPipe). A
// signal (the runtime's preemption signal) restarts the read; EOF is
// io.EOF.
func idleRead(_ *os.File, fd uintptr, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return 0, &os.PathError{Op: "read", Path: "sandbox-requests", Err: errno}
		case n == 0:
			return 0, io.EOF
		}
		return int(n), nil
	}
}

// processCPU is the user and system time this process has used: what a
// turn's CPU budget counts.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		// Getrusage(RUSAGE_SELF) fails only on a bad pointer.
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
