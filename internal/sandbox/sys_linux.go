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
	// Room for the heap at the bound and the GC's headroom over it, plus
	// thread stacks, goroutine stacks and runtime metadata.
	room := 2*memory + 512<<20
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

// mappedBytes is the process's current virtual size.
func mappedBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/self/statm")
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
