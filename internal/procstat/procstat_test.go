package procstat_test

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/procstat"
)

// A thread that sleeps gives up its CPU each time: the count of this
// process's context switches grows.
func TestThreadSwitchesCountsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procstat reads /proc")
	}
	switches := func(pid int) int64 {
		v, i := procstat.ThreadSwitches(pid)
		return v + i
	}
	before := switches(os.Getpid())
	for range 5 {
		time.Sleep(2 * time.Millisecond)
	}
	after := switches(os.Getpid())
	require.GreaterOrEqual(t, after-before, int64(5), "before %d, after %d", before, after)
	require.Zero(t, switches(-1), "no such process")
}

// Read finds this process's parent and name, and its CPU time grows
// while it computes, in step with what getrusage says.
func TestReadCountsThisProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procstat reads /proc")
	}
	before, ok := procstat.Read(os.Getpid())
	require.True(t, ok)
	require.Equal(t, os.Getpid(), before.PID)
	require.Equal(t, os.Getppid(), before.PPID)
	require.NotEmpty(t, before.Comm)

	// Spin until getrusage says this process used 100ms more CPU.
	rusage := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := rusage()
	for x := 0; rusage()-start < 100*time.Millisecond; x++ {
		_ = x * x
	}
	after, ok := procstat.Read(os.Getpid())
	require.True(t, ok)
	// Ticks are 10ms, and both count from the same kernel clock.
	require.InDelta(t, float64(rusage()), float64(after.CPU), float64(30*time.Millisecond))
	require.GreaterOrEqual(t, after.CPU-before.CPU, 80*time.Millisecond)

	_, ok = procstat.Read(-1)
	require.False(t, ok, "no such process")
}
