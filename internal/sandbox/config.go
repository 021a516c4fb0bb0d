package sandbox

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"time"

	"github.com/agentfleet/agentfleet/internal/egress"
)

// Defaults of Config and Limits. A zero field means its default.
const (
	CPUTimeDefault       = 5 * time.Second
	MemoryBytesDefault   = 256 << 20
	LogBytesDefault      = 16 << 10
	CarryBytesDefault    = 1 << 20
	FetchMaxBytesDefault = 1 << 20
	FetchTimeoutDefault  = 10 * time.Second
	// TurnTimeoutDefault bounds a turn in wall time, host calls
	// included, which the CPU limit does not count: room for a few slow
	// ai() sub-calls (tens of seconds each) and fetches (FetchTimeout
	// each), while a script looping on them ends within two minutes.
	TurnTimeoutDefault  = 2 * time.Minute
	MaxRedirectsDefault = 5
	// ChildProcsDefault is the GOMAXPROCS of a sandbox process. A script
	// is single-threaded, and a process that sleeps between requests pays
	// for a second P on every wake-up (the runtime starts a second thread
	// looking for work, and parks it again): with two Ps the production
	// bench counted 16-17 context switches per turn in the sandbox
	// processes, with one 11. The heap watcher, the CPU limit's timer,
	// cancels and the GC's background work share the one P with the
	// script; the runtime preempts a script that runs 10ms, so they wait
	// that long at most.
	ChildProcsDefault = 1
	// MaxProcessesDefault times PoolSize is the default MaxProcesses. An
	// idle sandbox process holds about 20 MiB of private memory.
	MaxProcessesDefault = 4
	IdleTimeoutDefault  = 30 * time.Second
)

// Lower bounds below which a limit cannot work (the child's own runtime
// needs some memory; a log cap must fit its cut marker).
const (
	minCPUTime     = 10 * time.Millisecond
	minMemoryBytes = 32 << 20
	minLogBytes    = 256
	minCarryBytes  = 1 << 10
	minFetchBytes  = 1 << 10
)

// killGrace is how long the parent waits past a deadline (CPU time past
// the limit, wall time after a cancellation) for a child to report
// before it kills it. A child in
// JavaScript code stops within microseconds; one stuck in a long native
// call (a huge sort, Array.prototype.fill over 1e10 slots) does not.
const killGrace = time.Second

// startTimeout bounds the handshake with a new sandbox process.
const startTimeout = 15 * time.Second

// Config configures a Pool.
type Config struct {
	// PoolSize is how many scripts run JavaScript at once, and how many
	// sandbox processes stay started between turns. A script waiting on
	// a host call (fetch, http, ai) gives up its place until the call
	// returns, so I/O-bound turns overlap beyond PoolSize. Zero means
	// 2*GOMAXPROCS.
	PoolSize int
	// MaxProcesses caps the sandbox processes, hence the turns in an
	// Execute at once: each holds its process from start to end,
	// including its host calls. Execute waits for one beyond it. Zero
	// means MaxProcessesDefault times PoolSize; less than PoolSize is
	// raised to PoolSize.
	MaxProcesses int
	// IdleTimeout is how long a process beyond PoolSize is kept idle
	// before it is stopped. Zero means IdleTimeoutDefault.
	IdleTimeout time.Duration
	// MemoryTotal bounds the memory of all the pool's sandbox processes
	// together, in bytes: each is charged ProcessMemory(Limits), what it
	// can come to hold, while it lives, and a turn that needs another
	// process when the charges would pass the bound waits for one to go
	// idle or end. Zero means DefaultMemoryTotal of the cgroup memory
	// limit (at least one process), or no bound outside a cgroup with a
	// limit; negative means no bound.
	MemoryTotal int64
	Limits      Limits
	// Policy decides each host primitive call (fetch, http, ai, aiJSON).
	// Nil means DefaultPolicy.
	Policy  Policy
	Network NetworkConfig
	// Executable is the binary started as a sandbox process. Empty means
	// os.Executable(): any binary importing this package can serve (see
	// the package doc). Set it to use a dedicated, smaller binary.
	Executable string
	// ChildProcs is GOMAXPROCS inside a sandbox process. Zero means
	// ChildProcsDefault.
	ChildProcs int
	// Logger receives operational messages (a sandbox process crashed or
	// was killed, with its stderr). Nil discards them.
	Logger *slog.Logger
}

// Limits bound one execution (one turn).
type Limits struct {
	// CPUTime is how long the script may run JavaScript: the CPU time
	// of its sandbox process, not counting host calls (fetch, ai). Time
	// spent waiting for a core on a busy machine does not count. A
	// script past it is interrupted (kind timeout).
	CPUTime time.Duration
	// TurnTimeout bounds the whole execution in wall time, host calls
	// included (kind timeout, with a message naming the wall-clock
	// limit). A host call whose function ignores its context is given
	// up a second after it.
	TurnTimeout time.Duration
	// MemoryBytes bounds the heap of the sandbox process during a turn
	// (kind memory). See the package doc for how.
	MemoryBytes int64
	// LogBytes caps log output; past it the middle is cut and marked.
	LogBytes int
	// CarryBytes caps run()'s return value and answer()'s argument,
	// serialized as JSON (kind limit).
	CarryBytes int
	// FetchMaxBytes caps a fetched body; longer bodies are truncated and
	// the response says so ("truncated": true).
	FetchMaxBytes int64
	// FetchTimeout bounds one fetch, redirects and body included.
	FetchTimeout time.Duration
}

// NetworkConfig configures the network guard of fetch and http. The guard
// is not a Policy: a Policy can deny more, but only Allow can open what the
// guard blocks, and no script can change it.
type NetworkConfig struct {
	// Allow lists addresses the guard lets through although they are in
	// a blocked range, for every turn, e.g. 127.0.0.1/32 for a test
	// server or a private service the agents are meant to reach. It is
	// the only thing that opens loopback; no cloud metadata address
	// opens.
	Allow []netip.Prefix
	// AllowHosts lists host names whose addresses the guard lets through
	// likewise ("*.corp.example" for its subdomains): what a name
	// resolves to is still checked when it is dialled.
	AllowHosts []string
	// Resolver resolves host names; nil means net.DefaultResolver. The
	// guard checks the addresses it returns at connect time, so a
	// resolver cannot route around it.
	Resolver Resolver
	// MaxRedirects caps the redirects one fetch follows. Zero means
	// MaxRedirectsDefault; negative means none.
	MaxRedirects int
	// DenyPrivate refuses every blocked range whatever Allow, AllowHosts
	// or a run's agent (ExecRequest.Egress) say
	// (AGENTFLEET_EGRESS_PRIVATE=deny).
	DenyPrivate bool
	// RootCAs, when set, are the certificate authorities fetch and http
	// trust instead of the system's (a private CA; tests).
	RootCAs *x509.CertPool
}

// Resolver resolves a host name to addresses; *net.Resolver implements it.
type Resolver = egress.Resolver

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.PoolSize == 0 {
		c.PoolSize = 2 * runtime.GOMAXPROCS(0)
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = MaxProcessesDefault * c.PoolSize
	}
	if c.MaxProcesses > 0 {
		c.MaxProcesses = max(c.MaxProcesses, c.PoolSize)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = IdleTimeoutDefault
	}
	if c.ChildProcs == 0 {
		c.ChildProcs = ChildProcsDefault
	}
	if c.Policy == nil {
		c.Policy = DefaultPolicy
	}
	if c.Network.MaxRedirects == 0 {
		c.Network.MaxRedirects = MaxRedirectsDefault
	}
	c.Limits = c.Limits.withDefaults()
	return c
}

func (l Limits) withDefaults() Limits {
	if l.CPUTime == 0 {
		l.CPUTime = CPUTimeDefault
	}
	if l.TurnTimeout == 0 {
		l.TurnTimeout = TurnTimeoutDefault
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = MemoryBytesDefault
	}
	if l.LogBytes == 0 {
		l.LogBytes = LogBytesDefault
	}
	if l.CarryBytes == 0 {
		l.CarryBytes = CarryBytesDefault
	}
	if l.FetchMaxBytes == 0 {
		l.FetchMaxBytes = FetchMaxBytesDefault
	}
	if l.FetchTimeout == 0 {
		l.FetchTimeout = FetchTimeoutDefault
	}
	return l
}

// validate checks a defaulted config; its messages say how to fix it.
func (c Config) validate() error {
	var errs []error
	if c.PoolSize < 0 {
		errs = append(errs, fmt.Errorf("PoolSize is %d; use a positive number of scripts running at once, or 0 for 2*GOMAXPROCS", c.PoolSize))
	}
	if c.MaxProcesses < 0 {
		errs = append(errs, fmt.Errorf("MaxProcesses is %d; use a positive number of sandbox processes, or 0 for %d*PoolSize", c.MaxProcesses, MaxProcessesDefault))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("IdleTimeout is %s; use a positive duration, or 0 for %s", c.IdleTimeout, IdleTimeoutDefault))
	}
	if c.ChildProcs < 0 {
		errs = append(errs, fmt.Errorf("ChildProcs is %d; use a positive GOMAXPROCS for sandbox processes, or 0 for %d", c.ChildProcs, ChildProcsDefault))
	}
	if per := ProcessMemory(c.Limits); c.MemoryTotal > 0 && c.MemoryTotal < per {
		errs = append(errs, fmt.Errorf("MemoryTotal is %s, less than one sandbox process can hold (%s: twice Limits.MemoryBytes plus %s); raise it, lower Limits.MemoryBytes, or use 0 to derive it from the cgroup memory limit",
			formatBytes(c.MemoryTotal), formatBytes(per), formatBytes(512<<20+childBaseBytes)))
	}
	l := c.Limits
	if l.CPUTime < minCPUTime {
		errs = append(errs, fmt.Errorf("Limits.CPUTime is %s; use at least %s, or 0 for the default %s", l.CPUTime, minCPUTime, CPUTimeDefault))
	}
	if l.TurnTimeout < l.CPUTime {
		errs = append(errs, fmt.Errorf("Limits.TurnTimeout (%s) is shorter than Limits.CPUTime (%s); raise it, or use 0 for the default %s", l.TurnTimeout, l.CPUTime, TurnTimeoutDefault))
	}
	if l.MemoryBytes < minMemoryBytes {
		errs = append(errs, fmt.Errorf("Limits.MemoryBytes is %d; a sandbox process needs at least %s, use 0 for the default %s",
			l.MemoryBytes, formatBytes(minMemoryBytes), formatBytes(MemoryBytesDefault)))
	}
	if l.LogBytes < minLogBytes {
		errs = append(errs, fmt.Errorf("Limits.LogBytes is %d; use at least %d (the cut marker must fit), or 0 for the default %s", l.LogBytes, minLogBytes, formatBytes(LogBytesDefault)))
	}
	if l.CarryBytes < minCarryBytes {
		errs = append(errs, fmt.Errorf("Limits.CarryBytes is %d; use at least %d, or 0 for the default %s", l.CarryBytes, minCarryBytes, formatBytes(CarryBytesDefault)))
	}
	if l.FetchMaxBytes < minFetchBytes {
		errs = append(errs, fmt.Errorf("Limits.FetchMaxBytes is %d; use at least %d, or 0 for the default %s", l.FetchMaxBytes, minFetchBytes, formatBytes(FetchMaxBytesDefault)))
	}
	if l.FetchTimeout < 0 {
		errs = append(errs, fmt.Errorf("Limits.FetchTimeout is %s; use a positive duration, or 0 for the default %s", l.FetchTimeout, FetchTimeoutDefault))
	}
	for i, p := range c.Network.Allow {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("Network.Allow[%d] is not a valid prefix; write it like netip.MustParsePrefix(\"10.1.2.0/24\")", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: invalid config: %w", err)
	}
	return nil
}
