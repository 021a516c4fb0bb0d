package procstat_test

import (
	"os"
	"runtime"
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
