// Package procstat reads what Linux's /proc says about a process: its
// CPU time, for the sandbox pool's kill backstop and the bench, and its
// threads' context switches, for the bench. Off Linux (no /proc) it
// reports nothing.
package procstat

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times; Linux fixes
// it at 100 for user space on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// Stat is what /proc/<pid>/stat says about a process. Times count whole
// clock ticks (10ms).
type Stat struct {
	PID, PPID int
	Comm      string
	// CPU is the user and system time of the process's threads, live
	// and ended; ReapedCPU is that of its children that exited and were
	// reaped.
	CPU, ReapedCPU time.Duration
}

// Read reads the stat of pid; false if the process is gone (or there is
// no /proc).
func Read(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	j := bytes.IndexByte(b, '(')
	if i < 0 || j < 0 || j > i {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return Stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	var ticks [4]int64
	for k, s := range f[11:15] {
		ticks[k], _ = strconv.ParseInt(s, 10, 64)
	}
	return Stat{
		PID: pid, PPID: ppid, Comm: string(b[j+1 : i]),
		CPU:       time.Duration(ticks[0]+ticks[1]) * clockTick,
		ReapedCPU: time.Duration(ticks[2]+ticks[3]) * clockTick,
	}, true
}

// ThreadSwitches sums the context switches of the live threads of pid:
// voluntary ones (a thread blocked or slept) and involuntary ones (the
// kernel preempted it, which depends on what else the machine runs).
// Threads that have ended are not counted; a Go process keeps its
// threads. A process that is gone reports zero.
func ThreadSwitches(pid int) (voluntary, involuntary int64) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name() + "/status")
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				voluntary += parseCount(v)
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				involuntary += parseCount(v)
			}
		}
	}
	return voluntary, involuntary
}

func parseCount(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}
