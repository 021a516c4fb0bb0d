package bus

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Test hooks: the external tests inspect server state through the same
// JetStream handle the Bus uses, and simulate a crashed process.

func (b *Bus) JetStreamForTest() jetstream.JetStream { return b.js }

func (b *Bus) ConnForTest() *nats.Conn { return b.nc }

func (b *Bus) StreamForTest(q string) string {
	switch q {
	case "runq":
		return b.n.stream(streamRunQ)
	case "work":
		return b.n.stream(streamWork)
	case "events":
		return b.n.stream(streamEvents)
	case "dlq":
		return b.n.stream(streamDLQ)
	}
	panic("unknown stream " + q)
}

func (b *Bus) SubjectForTest(q Queue, tenant, runID string) string {
	return b.n.queueSubject(q, tenant, runID)
}

// KillConnForTest drops the connection for good without releasing
// anything, as a crashed process would.
func (b *Bus) KillConnForTest() { b.nc.Close() }

func (s *TurnSource) NamesForTest() (stream, durable string) { return s.stream, s.durable }

func (b *Bus) LeaseBucketForTest(name string) string { return b.n.leaseBucket(name) }

// SetClockForTest makes the tally read the time from now, so a test can
// age announcements past SlotsTTL.
func (t *SlotTally) SetClockForTest(now func() time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
}

// SetLeaseTokenForTest makes every Lease started until the test ends use
// token: a second contender with the same bus name then writes the same
// record, as one whose Create was stored but whose reply was lost would
// find it. Not for parallel tests: it sets a package variable.
func SetLeaseTokenForTest(t interface{ Cleanup(func()) }, token string) {
	old := leaseToken
	leaseToken = func() string { return token }
	t.Cleanup(func() { leaseToken = old })
}

// ServerForTest is the name of the server the Bus is connected to.
func (b *Bus) ServerForTest() string { return b.nc.ConnectedServerName() }
