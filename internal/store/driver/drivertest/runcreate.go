package drivertest

import "testing"

func exerciseRunCreate(t *testing.T, open func(*testing.T) Backend) {
	t.Skip("not written yet")
}
