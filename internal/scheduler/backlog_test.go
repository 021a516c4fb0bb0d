package scheduler

import "testing"

func TestUndeliveredAtLeastCountsTheLastBatchNotYetDelivered(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		numPending, delivered uint64
		forwarded             []uint64
		want                  uint64
	}{
		{"the server has not counted the batch yet", 0, 10, []uint64{11, 12, 13, 14}, 4},
		{"the server counted it, and more", 6, 10, []uint64{11, 12, 13, 14}, 6},
		{"part of the batch delivered", 0, 12, []uint64{11, 12, 13, 14}, 2},
		{"all of it delivered", 0, 14, []uint64{11, 12, 13, 14}, 0},
		{"nothing forwarded", 3, 10, nil, 3},
		// After a reset the stream starts again from 1: the old batch's
		// sequences are above anything delivered, and cost one batch.
		{"stream reset", 0, 2, []uint64{9000, 9001}, 2},
	} {
		if got := undeliveredAtLeast(tc.numPending, tc.delivered, tc.forwarded); got != tc.want {
			t.Errorf("%s: undeliveredAtLeast(%d, %d, %v) = %d, want %d", tc.name, tc.numPending, tc.delivered, tc.forwarded, got, tc.want)
		}
	}
}
