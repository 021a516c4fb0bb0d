package sandbox

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/procstat"
)

// A script's CPU time limit counts CPU time. A sandbox process that is
// not running (here it is stopped, as a busy machine would leave it
// waiting for a core) is not charged for the wall time that passes:
// neither by its own deadline nor by the parent's kill backstop, both of
// which a wall clock would have passed.
func TestCPULimitCountsCPUNotWallTime(t *testing.T) {
	t.Parallel()
	cpu := time.Second
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 1, Limits: Limits{CPUTime: cpu}})
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))
	p.mu.Lock()
	require.Len(t, p.idle, 1)
	pid := p.idle[0].cmd.Process.Pid
	p.mu.Unlock()
	// After a result the process builds the next turn's runtime; let it
	// finish, so that only the script makes its CPU time grow below.
	before := idleCPU(t, pid)

	// The script computes for 3s of wall time. Stopped for 2.5s of it,
	// it uses about 0.5s of CPU.
	type outcome struct {
		res agentfleet.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Execute(context.Background(), agentfleet.ExecRequest{Tenant: "t", RunID: "r",
			Script: `function run() { const end = Date.now() + 3000; let i = 0; while (Date.now() < end) i++; return "done" }`})
		done <- outcome{res, err}
	}()
	// Stop the process once the script is running: its CPU time grows.
	require.Eventually(t, func() bool {
		st, _ := procstat.Read(pid)
		return st.CPU-before >= 100*time.Millisecond
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	time.Sleep(cpu + killGrace + 500*time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	o := <-done
	require.NoError(t, o.err)
	require.Equal(t, `"done"`, ok(t, o.res))
	live, _ := p.Processes()
	require.Equal(t, 1, live, "the process was not killed")
}

// idleCPU waits until pid's CPU time stops growing and returns it.
func idleCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	last := time.Duration(-1)
	for range 100 {
		st, found := procstat.Read(pid)
		require.True(t, found)
		if st.CPU == last {
			return last
		}
		last = st.CPU
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("process %d kept using CPU", pid)
	return 0
}
