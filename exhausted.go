package agentfleet

import (
	"errors"
	"syscall"
)

// ErrExhausted marks a failure of the worker's own resources (file
// descriptors, memory for a sandbox process, a connection to the model),
// not of the run: the worker hands the turn back for later without
// counting the attempt toward the dead-letter limit, and takes fewer
// turns until it recovers. Wrap it where such an error surfaces.
var ErrExhausted = errors.New("worker out of resources")

// OutOfDescriptors reports whether err is a system call's refusal for
// want of file descriptors or socket buffers (EMFILE, ENFILE, ENOBUFS):
// exhaustion wherever it surfaces, unlike ENOMEM or EAGAIN, which mean
// exhaustion only where the caller knows the call (a process start).
func OutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS)
}

// Exhausted reports whether err is the worker's own exhaustion:
// ErrExhausted, or OutOfDescriptors.
func Exhausted(err error) bool {
	return err != nil && (errors.Is(err, ErrExhausted) || OutOfDescriptors(err))
}
