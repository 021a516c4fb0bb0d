package fleet

import (
	"testing"
	"time"

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

func TestEventsMaxAgeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
		err  bool
	}{
		{env: "", want: 0}, // the bus default, 7 days
		{env: "24h", want: 24 * time.Hour},
		{env: "7d", want: 7 * 24 * time.Hour},
		{env: "90m", want: 90 * time.Minute},
		{env: "30s", err: true},
		{env: "0d", err: true},
		{env: "1.5d", err: true},
		{env: "-1d", err: true},
		{env: "a week", err: true},
	} {
		t.Setenv("AGENTFLEET_EVENTS_MAX_AGE", tc.env)
		cfg, err := ConfigFromEnv()
		if tc.err {
			require.ErrorContains(t, err, "AGENTFLEET_EVENTS_MAX_AGE", tc.env)
			continue
		}
		require.NoError(t, err, tc.env)
		require.Equal(t, tc.want, cfg.EventsMaxAge, tc.env)
	}
}
