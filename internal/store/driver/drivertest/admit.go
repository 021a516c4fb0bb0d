package drivertest

import "testing"

func exerciseAdmit(t *testing.T, open func(*testing.T) Backend) {
	t.Skip("not written yet")
}
