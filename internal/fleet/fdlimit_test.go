package fleet

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/sandbox"
)

// Slots are capped to what the file descriptors hold after the process's
// own and its sandbox processes' are set aside.
func TestSlotsHeld(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit          uint64
		workers, procs int
		want           int
	}{
		{1024, 1, 64, 1024 - fdsReserved - 64*fdsPerSandboxProcess},
		{1024, 4, 64, (1024 - fdsReserved - 64*fdsPerSandboxProcess) / 4},
		{20000, 1, 64, 20000 - fdsReserved - 64*fdsPerSandboxProcess},
		{256, 1, 64, 1},
	}
	for _, c := range cases {
		require.Equal(t, c.want, slotsHeld(c.limit, c.workers, c.procs), "%+v", c)
	}
}

// Slots the limit holds are left as they are, without a warning.
func TestCapSlotsKeepsWhatTheLimitHolds(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	limit, ok := raiseFileLimit()
	if !ok {
		t.Skip("no file-descriptor limit here")
	}
	held := slotsHeld(limit, 1, 8)
	require.Equal(t, held, capSlots(held, 1, sandbox.Config{MaxProcesses: 8}, log))
	require.Empty(t, logs.String())
	require.Equal(t, held, capSlots(held+1000, 1, sandbox.Config{MaxProcesses: 8}, log))
	require.Contains(t, logs.String(), "not enough file descriptors for the worker slots")
}
