package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// TestChildLimits reads a live sandbox process's limits from /proc. The
// tests run as root in CI, where RLIMIT_NPROC is not enforced: what is
// checked is that each limit is set.
func TestChildLimits(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1})
	// Date needs the zone file, loaded before the process was confined.
	ok(t, run(t, p, `function run() { return new Date(0).getFullYear() }`, ""))
	pid := onlyChildPid(t, p)
	dir := "/proc/" + strconv.Itoa(pid)

	limits := procLimits(t, dir)
	require.Equal(t, [2]string{strconv.Itoa(childMaxFiles), strconv.Itoa(childMaxFiles)}, limits["Max open files"])
	require.Equal(t, [2]string{"0", "0"}, limits["Max core file size"])
	nproc := limits["Max processes"]
	require.NotEqual(t, "unlimited", nproc[0])
	require.Equal(t, nproc[0], nproc[1], "the hard limit is lowered too, so the process cannot raise it")
	require.NotEqual(t, "unlimited", limits["Max address space"][1])
	if mine := procLimits(t, "/proc/self")["Max processes"]; mine[1] != "unlimited" {
		n, _ := strconv.Atoi(nproc[1])
		m, _ := strconv.Atoi(mine[1])
		require.LessOrEqual(t, n, m)
	}

	// no_new_privs is a per-thread flag: every thread has it.
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, "1", procStatus(t, filepath.Join(dir, "task", task.Name()))["NoNewPrivs"], "thread %s", task.Name())
	}
	require.Equal(t, "1", procStatus(t, dir)["NoNewPrivs"])
	// Under memory pressure the kernel kills a sandbox process first.
	adj, err := os.ReadFile(filepath.Join(dir, "oom_score_adj"))
	require.NoError(t, err)
	require.Equal(t, "1000", strings.TrimSpace(string(adj)))

	// The process serves on under its limits.
	require.Equal(t, `"ok"`, ok(t, execute(t, p, agentfleet.ExecRequest{Script: `function run() { return "ok" }`})))
}

// procLimits parses /proc/<pid>/limits: soft and hard limit by name.
func procLimits(t *testing.T, dir string) map[string][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "limits"))
	require.NoError(t, err)
	out := map[string][2]string{}
	lines := strings.Split(string(b), "\n")
	header := lines[0]
	soft, hard := strings.Index(header, "Soft Limit"), strings.Index(header, "Hard Limit")
	for _, l := range lines[1:] {
		if len(l) <= hard {
			continue
		}
		name := strings.TrimSpace(l[:soft])
		out[name] = [2]string{strings.Fields(l[soft:hard])[0], strings.Fields(l[hard:])[0]}
	}
	return out
}

func procStatus(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
