package sandbox

import (
	"testing"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/procstat"
)

// A sandbox process waiting for its next turn keeps its P (requestPipe):
// it neither makes the runtime's monitor take the P back and hand it to a
// spare thread, nor keeps the monitor polling. Turns with gaps between
// them, as a worker sends them, then cost the process about two context
// switches each (wake for the request, sleep after the reply), not the
// six or more of a plain blocking read.
func TestIdleSandboxProcessSwitchesLittlePerTurn(t *testing.T) {
	p := newPool(t, Config{PoolSize: 1})
	req := agentfleet.ExecRequest{Script: `function run(args) { return {n: 1} }`}
	execute(t, p, req) // start the process
	pid := onlyChildPid(t, p)

	const turns = 300
	before := taskSwitches(t, pid)
	for range turns {
		execute(t, p, req)
		time.Sleep(300 * time.Microsecond) // the worker's own work between turns
	}
	per := float64(taskSwitches(t, pid)-before) / turns
	t.Logf("%.2f voluntary context switches per turn in the sandbox process", per)
	if per > 4 {
		t.Fatalf("%.2f voluntary context switches per turn in the sandbox process; an idle one that keeps its P makes about 2", per)
	}
}

// taskSwitches is the voluntary context switches (a thread blocking or
// sleeping) of every thread of process pid; involuntary ones depend on
// what else the machine runs.
func taskSwitches(t *testing.T, pid int) int64 {
	t.Helper()
	v, _ := procstat.ThreadSwitches(pid)
	if v == 0 {
		t.Fatalf("no context switches read for the sandbox process %d", pid)
	}
	return v
}
