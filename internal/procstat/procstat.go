// Package procstat reads what Linux's /proc says about a process's
// threads, for the figures the bench reports and the tests that check
// them. Off Linux (no /proc) it reports zero.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

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
