package drivertest

import "testing"

func exerciseTurnCommit(t *testing.T, open func(*testing.T) Backend) {
	t.Skip("not written yet")
}
