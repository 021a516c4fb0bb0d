//go:build unix

package fleet

import "syscall"

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the soft limit now in force.
func raiseFileLimit() (uint64, bool) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, false
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = l.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			l = raised
		}
	}
	if l.Cur >= 1<<62 { // unlimited
		return 0, false
	}
	return uint64(l.Cur), true
}
