package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSandboxProcessesFromEnv(t *testing.T) {
	for _, tc := range []struct {
		slots, procs string
		workers      int
		want         int
		err          string
	}{
		{slots: "8", workers: 1, want: 8},
		{slots: "8", workers: 3, want: 24},
		{slots: "500", workers: 1, want: SandboxProcessesDefaultMax},
		{slots: "500", procs: "200", workers: 1, want: 200},
		{slots: "8", procs: "-1", err: "AGENTFLEET_SANDBOX_PROCESSES must not be negative"},
		{slots: "8", procs: "many", err: "AGENTFLEET_SANDBOX_PROCESSES"},
	} {
		t.Setenv("AGENTFLEET_WORKER_SLOTS", tc.slots)
		t.Setenv("AGENTFLEET_SANDBOX_PROCESSES", tc.procs)
		cfg, err := ConfigFromEnv()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, cfg.sandboxProcesses(tc.workers), "slots %s, processes %q, workers %d", tc.slots, tc.procs, tc.workers)
	}
}
