package drivertest

import "testing"

func exerciseTurnLoad(t *testing.T, open func(*testing.T) Backend) {
	t.Skip("not written yet")
}
