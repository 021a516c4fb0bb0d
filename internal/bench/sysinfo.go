package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentfleet/agentfleet/internal/procstat"
)

// Machine describes where the figures were measured.
type Machine struct {
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	CPUModel   string `json:"cpu_model"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Kernel     string `json:"kernel,omitempty"`
	MemTotalMB int64  `json:"mem_total_mb,omitempty"`
	// NoFile is the soft RLIMIT_NOFILE the bench ran with (raised to the
	// hard limit at start).
	NoFile uint64 `json:"nofile,omitempty"`
	// LoadAvg is the 1-minute load average when the bench started: other
	// work on a machine skews every figure.
	LoadAvg float64 `json:"load_avg_1m"`
}

func machineInfo() Machine {
	m := Machine{
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUModel: cpuModel(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if kb := meminfoKB("MemTotal"); kb > 0 {
		m.MemTotalMB = kb / 1024
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		m.NoFile = lim.Cur
	}
	m.LoadAvg = loadAvg()
	return m
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func meminfoKB(key string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// raiseNoFile raises the soft file descriptor limit to the hard one: a
// fleet holding thousands of turns in flight holds two sockets per turn
// in this process (the model client's and the fake model's).
func raiseNoFile() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// postgresCPU is the CPU time of the processes named "postgres" on this
// machine: a local server's postmaster and its live backends, with what
// the postmaster's reaped backends used. Zero when there are none.
func postgresCPU() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procstat.Read(pid); ok && st.Comm == "postgres" {
			total += st.CPU + st.ReapedCPU
		}
	}
	return total
}

// descendants returns the live descendants of this process (sandbox
// processes, spawned fleet processes and theirs).
func descendants() []procstat.Stat { return descendantsOf(os.Getpid()) }

// descendantsOf returns the live descendants of pid.
func descendantsOf(root int) []procstat.Stat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procstat.Stat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procstat.Read(pid); ok {
			children[st.PPID] = append(children[st.PPID], st)
		}
	}
	var out []procstat.Stat
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// cpuTimes is the CPU time used so far by this process (self) and by
// every process it started, live or gone (children):
// getrusage(RUSAGE_SELF); getrusage(RUSAGE_CHILDREN), which holds only
// children that exited and were reaped, plus the user and system time of
// every live descendant (with its own reaped children) from /proc. A
// process that exits moves from the last term to the second (or to its
// parent's share of the last), so the sum only grows.
func cpuTimes() (self, children time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, d := range descendants() {
		children += d.CPU + d.ReapedCPU
	}
	return self, children
}

// contextSwitches is how often the threads of this process (self) and of
// every process it started (children) have given up a CPU so far,
// voluntarily (to wait) or not: getrusage's counts for this process and
// for reaped children, plus the counts of every live thread of each live
// descendant from /proc (threads that ended in a live descendant are not
// counted; a Go process keeps its threads).
func contextSwitches() (self, children int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = ru.Nvcsw + ru.Nivcsw
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		children = ru.Nvcsw + ru.Nivcsw
	}
	for _, d := range descendants() {
		children += threadSwitches(d.PID)
	}
	return self, children
}

// threadSwitches sums the context switches of the live threads of pid.
func threadSwitches(pid int) int64 {
	v, i := procstat.ThreadSwitches(pid)
	return v + i
}

// rssSampler reads the resident memory (VmRSS) of this process and of
// every live descendant, in bytes. Pages shared between processes (the
// sandbox processes run this same binary) count once per process, as RSS
// does. Finding the descendants means reading every process's stat, so
// the tree is refreshed once a second and sampled in between.
type rssSampler struct {
	pids    []int
	scanned time.Time
}

func (r *rssSampler) sample() int64 {
	if time.Since(r.scanned) > time.Second {
		r.pids = r.pids[:0]
		for _, d := range descendants() {
			r.pids = append(r.pids, d.PID)
		}
		r.scanned = time.Now()
	}
	total := vmRSS(os.Getpid())
	for _, pid := range r.pids {
		total += vmRSS(pid)
	}
	return total
}

// rssTree samples once.
func rssTree() int64 { return new(rssSampler).sample() }

func vmRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
