//go:build !linux

package sandbox

import (
	"os"
	"syscall"
	"time"
)

// limitAddressSpace is a no-op off Linux: RLIMIT_AS is not enforced
// reliably elsewhere (macOS ignores it). The heap watcher still bounds
// gradual growth; a single huge allocation can kill the sandbox process,
// which the parent reports and replaces. Production runs on Linux.
func limitAddressSpace(int64) error { return nil }

func childSysProcAttr() *syscall.SysProcAttr { return nil }

// limitResources is a no-op off Linux; see sys_linux.go.
func limitResources() error { return nil }

// prepareSpawnThread is a no-op off Linux, which has no no_new_privs.
func prepareSpawnThread() error { return nil }

// pipe is os.Pipe off Linux; only round-trip latency differs.
func pipe() (r, w *os.File, err error) { return os.Pipe() }

// idleRead is a plain read off Linux.
func idleRead(f *os.File, _ uintptr, b []byte) (int, error) { return f.Read(b) }

// processStart is when this process began, for processCPU.
var processStart = time.Now()

// processCPU is, off Linux, the wall time since the process started: a
// turn's CPU budget counts wall time there. Production runs on Linux.
func processCPU() time.Duration { return time.Since(processStart) }
