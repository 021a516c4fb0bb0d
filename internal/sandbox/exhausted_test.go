package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// A process start that failed for want of the worker's resources is
// marked as its exhaustion (the turn is handed back, not failed); any
// other start failure is not.
func TestStartErrMarksExhaustion(t *testing.T) {
	t.Parallel()
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EAGAIN} {
		err := startErr(fmt.Errorf("sandbox: start process: %w", os.NewSyscallError("pipe2", errno)))
		require.ErrorIs(t, err, agentfleet.ErrExhausted, "%v", errno)
		require.ErrorIs(t, err, errno)
	}
	for _, err := range []error{
		fmt.Errorf("sandbox: start process: %w", &os.PathError{Op: "fork/exec", Path: "/nonexistent", Err: syscall.ENOENT}),
		errors.New("sandbox: child did not start"),
	} {
		require.NotErrorIs(t, startErr(err), agentfleet.ErrExhausted)
	}
}
