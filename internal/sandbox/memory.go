package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The memory of a pool's sandbox processes together is bounded
// (Config.MemoryTotal): each live process is charged what it can come to
// hold, ProcessMemory, from its start until it is reaped, and a turn
// that needs a new process while the charges would pass the bound waits
// for one to go idle or end. The charge is the worst case, not a guess:
// a single allocation can touch nearly all the address space RLIMIT_AS
// lets a process map, before the heap watcher can see it.

// childBaseBytes is what a sandbox process holds at start, before its
// address-space room: an idle one was measured at about 14 MiB resident.
const childBaseBytes = 32 << 20

// addressSpaceRoom is what a sandbox process may map beyond its mapping
// at start (RLIMIT_AS, limitAddressSpace): the heap at the bound and the
// GC's headroom over it, plus thread stacks, goroutine stacks and runtime
// metadata. Race-enabled binaries get more (their shadow memory), which
// ProcessMemory does not count: they only run tests.
func addressSpaceRoom(memory int64) int64 { return 2*memory + 512<<20 }

// ProcessMemory is what one sandbox process running under limits can
// come to hold, and what each is charged against Config.MemoryTotal:
// about 1 GiB with the default MemoryBytes of 256 MiB.
func ProcessMemory(limits Limits) int64 {
	return addressSpaceRoom(limits.withDefaults().MemoryBytes) + childBaseBytes
}

// Bounds of the share of a cgroup's memory limit that the worker keeps
// for itself when the sandbox bound is derived from it: a quarter,
// within these.
const (
	workerReserveMin = 512 << 20
	workerReserveMax = 2 << 30
)

// DefaultMemoryTotal is the bound on the sandbox processes' memory that a
// process whose cgroup allows limit bytes uses when none is configured:
// the limit less what the worker keeps for its own heap, a quarter of it
// but at least 512 MiB and at most 2 GiB. (8 GiB leaves 6 GiB to the
// sandbox processes, 32 GiB leaves 30.)
func DefaultMemoryTotal(limit int64) int64 {
	return limit - min(max(limit/4, workerReserveMin), workerReserveMax)
}

// memoryTotal resolves Config.MemoryTotal: configured, derived from the
// cgroup's limit (cgroupMemoryLimit), or none (negative).
func memoryTotal(configured, perProcess int64, cgroup func() (int64, bool)) int64 {
	if configured != 0 {
		return configured
	}
	limit, ok := cgroup()
	if !ok {
		return -1
	}
	// A cgroup too small for two processes still runs one at a time.
	return max(DefaultMemoryTotal(limit), perProcess)
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (v2
// memory.max, v1 memory.limit_in_bytes), the lowest of it and its
// ancestors'; false when there is none.
func cgroupMemoryLimit() (int64, bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	return memoryLimitIn("/sys/fs/cgroup", string(self))
}

// memoryLimitIn finds the limit for the cgroups listed in self (the
// text of /proc/self/cgroup) under the cgroup file systems at root. It
// reads every level from the process's cgroup up to the mount's root,
// which is also the container's own cgroup when the mount shows only
// that (a cgroup namespace, or a v1 mount of the container's hierarchy).
func memoryLimitIn(root, self string) (int64, bool) {
	lowest := int64(-1)
	walk := func(top, path, file string) {
		for d := filepath.Join(top, path); strings.HasPrefix(d, top); d = filepath.Dir(d) {
			if v, ok := readMemoryLimit(filepath.Join(d, file)); ok && (lowest < 0 || v < lowest) {
				lowest = v
			}
			if d == top {
				break
			}
		}
	}
	for line := range strings.Lines(self) {
		id, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			walk(root, path, "memory.max")
			walk(filepath.Join(root, "unified"), path, "memory.max")
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			walk(filepath.Join(root, "memory"), path, "memory.limit_in_bytes")
		}
	}
	return lowest, lowest >= 0
}

// readMemoryLimit reads a cgroup memory limit file; "max" (v2) and v1's
// page-rounded maximum mean no limit.
func readMemoryLimit(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0, false
	}
	return v, true
}
