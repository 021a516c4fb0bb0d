package sandbox

import (
	"errors"
	"fmt"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// confine locks the sandbox process in, so that what holds a script is
// the kernel and not only goja: code that escaped the JavaScript runtime
// runs as the worker's user and could otherwise read the worker's
// /proc/<pid>/environ (the provider key, the database URL), the data
// directory (signing key, admin token) or open connections of its own.
//
// Landlock (where the kernel has it) takes away all file system access
// and TCP bind and connect; the seccomp filter then allows only the
// system calls a sandbox process makes once started (seccompAllowed):
// no open, no socket, no exec, no ptrace, signals to itself only. Both
// cover every thread. childMain calls it after everything the process
// opens at start and before it reads its first request; the process
// works on the pipes it inherited and on memory from then on.
//
// Seccomp is required: a process that cannot install its filter exits
// (exitSetup) and the pool reports why, rather than run scripts
// unconfined. Landlock is best effort: missing, the process says so in
// its hello and seccomp alone keeps files and sockets out of reach.
func confine(layers confineLayers) (confinement, error) {
	var c confinement
	// Load the zone file now: Date needs time.Local, which is read on
	// first use, and nothing can be opened later.
	_ = time.Local.String()
	// Landlock first: its own system calls are not in the filter.
	if layers&layerLandlock != 0 {
		abi, note, err := restrictLandlock()
		if err != nil {
			return c, err
		}
		c.landlock, c.note = abi, note
	} else {
		c.note = "Landlock not applied (test)"
	}
	if layers&layerSeccomp != 0 {
		if err := loadSeccomp(); err != nil {
			return c, err
		}
		c.seccomp = true
	}
	return c, nil
}

// landlockScopeSignalABI is the first Landlock ABI that restricts all of
// a process's threads at once (LANDLOCK_RESTRICT_SELF_TSYNC). Before it,
// each thread gets a domain of its own, and scoping signals would stop
// the Go runtime's threads from preempting one another; the seccomp
// filter limits signals to this process anyway.
const landlockScopeSignalABI = 8

// restrictLandlock denies the process every file system access right and
// TCP (and, on newer kernels, UDP) bind and connect, with no exception,
// and scopes abstract unix sockets (and signals, see
// landlockScopeSignalABI) to itself. It returns the ABI version applied,
// or 0 and why Landlock is missing; an error only when a kernel that has
// Landlock refuses it.
func restrictLandlock() (abi int, note string, err error) {
	v, err := llsys.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.ENOSYS):
		return 0, "the kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)", nil
	case errors.Is(err, unix.EOPNOTSUPP):
		return 0, "the kernel has Landlock but it is not enabled at boot (landlock is not in lsm=)", nil
	case errors.Is(err, unix.EPERM):
		return 0, "a seccomp profile the worker runs under (a container's) refuses Landlock's system calls", nil
	case err != nil:
		return 0, fmt.Sprintf("Landlock is unavailable: %v", err), nil
	}
	cfg := landlock.V11.BestEffort()
	if v < landlockScopeSignalABI {
		cfg.Scoped &^= llsys.ScopeSignal
	}
	if err := cfg.Restrict(); err != nil {
		return 0, "", fmt.Errorf("landlock (ABI %d): %w", v, err)
	}
	return min(v, 11), "", nil
}

// seccompAllowed are the system calls a started sandbox process makes:
// the Go runtime's (memory, threads, scheduling, signals, timers, the
// poller) and the child's own (blocking reads and writes on its pipes,
// getrusage for the CPU budget, exit). Everything else fails with EPERM.
// The hottest come first: the filter tests them in order.
//
// Names this architecture lacks (epoll_wait on arm64) are dropped.
var seccompAllowed = []string{
	"futex", "read", "write", "getrusage", "nanosleep", "epoll_pwait",
	"epoll_wait", "sched_yield", "clock_gettime", "madvise", "mmap", "munmap",
	"rt_sigreturn", "rt_sigprocmask", "sigaltstack", "gettid", "getpid",
	"getrandom", "clock_nanosleep", "gettimeofday", "restart_syscall",
	"epoll_ctl", "epoll_create1", "eventfd2", "close", "rt_sigaction",
	"sched_getaffinity", "exit", "exit_group",
	// A binary built with cgo starts its threads with glibc's
	// pthread_create, which maps a stack with a guard page and
	// registers the thread's robust futex list and rseq area.
	"mprotect", "set_robust_list", "rseq",
}

// seccompENOSYS are refused as unknown, so that a caller falls back to
// an older call the filter can check: glibc's pthread_create tries
// clone3, whose flags are out of a filter's reach, before clone.
var seccompENOSYS = []string{"clone3"}

// cloneNamespaces are the clone flags that make new namespaces.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompConditions allows clone for threads only (no fork: a thread
// shares this process's filter and limits), signals only to this process
// (pid; the worker is in the same process group, so kill(0) would reach
// it), and prctl only to name memory mappings, as the Go runtime does.
func seccompConditions(pid int) []seccomp.NameWithConditions {
	self := []seccomp.Condition{{Argument: 0, Operation: seccomp.Equal, Value: uint64(pid)}}
	return []seccomp.NameWithConditions{
		{Name: "clone", Conditions: []seccomp.Condition{
			{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
			{Argument: 0, Operation: seccomp.BitsNotSet, Value: cloneNamespaces},
		}},
		{Name: "tgkill", Conditions: self},
		{Name: "kill", Conditions: self},
		{Name: "prctl", Conditions: []seccomp.Condition{
			{Argument: 0, Operation: seccomp.Equal, Value: unix.PR_SET_VMA},
			{Argument: 1, Operation: seccomp.Equal, Value: unix.PR_SET_VMA_ANON_NAME},
		}},
	}
}

// seccompPolicy is the filter for the process pid, as the library
// assembles it for this architecture.
func seccompPolicy(pid int) (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, err
	}
	known := func(list []string) []string {
		var names []string
		for _, n := range list {
			if _, ok := info.SyscallNames[n]; ok {
				names = append(names, n)
			}
		}
		return names
	}
	names := known(seccompAllowed)
	return seccomp.Policy{
		DefaultAction: seccomp.ActionErrno, // EPERM
		Syscalls: []seccomp.SyscallGroup{{
			Action:             seccomp.ActionAllow,
			Names:              names,
			NamesWithCondtions: seccompConditions(pid),
		}, {
			Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
			Names:  known(seccompENOSYS),
		}},
	}, nil
}

// loadSeccomp installs the filter on every thread of the process (TSYNC:
// the Go runtime runs on several, and any of them may run a script).
func loadSeccomp() error {
	policy, err := seccompPolicy(unix.Getpid())
	if err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	err = seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: policy})
	if err != nil {
		return fmt.Errorf("install the seccomp filter (a sandbox process needs a kernel with seccomp filters, Linux 3.17 or later): %w", err)
	}
	return nil
}
