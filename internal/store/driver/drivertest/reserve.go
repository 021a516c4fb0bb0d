package drivertest

import "testing"

func exerciseReserve(t *testing.T, open func(*testing.T) Backend) {
	t.Skip("not written yet")
}
