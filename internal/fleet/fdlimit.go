package fleet

import (
	"log/slog"
	"runtime"

	"github.com/agentfleet/agentfleet/internal/sandbox"
)

// What a worker process's file descriptors go to, for capping its slots
// at start (capSlots).
const (
	// fdsReserved is the process's own: its NATS and store connections,
	// listeners, logs and idle connections (and, in dev mode, the
	// embedded NATS server's and the API's).
	fdsReserved = 256
	// fdsPerSandboxProcess is the parent's ends of a sandbox process's
	// pipes, with room for the ones a start holds briefly.
	fdsPerSandboxProcess = 4
	// fdsPerSlot: a turn waiting on the model holds a connection to it
	// (over HTTP/1.1; streams of HTTP/2 share a few).
	fdsPerSlot = 1
)

// capSlots caps the slots of each of a process's workers workers to what
// its file descriptors can hold, after raising the soft limit
// (RLIMIT_NOFILE) to the hard one, and warns when it lowered them: a
// worker that runs out mid-turn hands turns back and slows down, but one
// sized to its descriptors does not get there.
func capSlots(slots, workers int, sb sandbox.Config, log *slog.Logger) int {
	limit, ok := raiseFileLimit()
	if !ok {
		return slots
	}
	procs := sb.MaxProcesses
	if procs <= 0 {
		procs = sandbox.MaxProcessesDefault * max(sb.PoolSize, runtime.GOMAXPROCS(0))
	}
	most := slotsHeld(limit, workers, procs)
	if slots <= most {
		return slots
	}
	log.Warn("not enough file descriptors for the worker slots: using fewer; raise the limit (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=) to use them all",
		"slots", slots, "using", most, "workers", workers, "fd_limit", limit, "sandbox_processes", procs)
	return most
}

// slotsHeld is how many slots each of workers workers can have in a
// process that may open limit file descriptors and runs procs sandbox
// processes: at least one.
func slotsHeld(limit uint64, workers, procs int) int {
	room := int64(limit) - fdsReserved - int64(procs)*fdsPerSandboxProcess
	return int(max(1, room/fdsPerSlot/int64(max(workers, 1))))
}
