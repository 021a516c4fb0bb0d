//go:build !unix

package fleet

// raiseFileLimit: no RLIMIT_NOFILE here; slots are not capped.
func raiseFileLimit() (uint64, bool) { return 0, false }
