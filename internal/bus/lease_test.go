package bus_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

const leaseTTL = time.Second

// contend starts two contenders in two "processes" and returns them
// holder first.
func contend(t *testing.T, s bundle) (holder, other *bus.Lease, holderBus, otherBus *bus.Bus) {
	t.Helper()
	b2 := bustest.Connect(t, s.e)
	l1, err := s.b.Lease(s.ctx, "scheduler", leaseTTL)
	require.NoError(t, err)
	l2, err := b2.Lease(s.ctx, "scheduler", leaseTTL)
	require.NoError(t, err)
	select {
	case <-l1.Held():
		return l1, l2, s.b, b2
	case <-l2.Held():
		return l2, l1, b2, s.b
	case <-s.ctx.Done():
		t.Fatal("nobody acquired the lease")
	}
	return nil, nil, nil, nil
}

func held(l *bus.Lease) bool {
	select {
	case <-l.Held():
		return true
	default:
		return false
	}
}

func lost(l *bus.Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

func leaseValue(t *testing.T, s bundle, b *bus.Bus) string {
	t.Helper()
	kv, err := b.JetStreamForTest().KeyValue(s.ctx, b.LeaseBucketForTest("scheduler"))
	require.NoError(t, err)
	e, err := kv.Get(s.ctx, "holder")
	require.NoError(t, err)
	return string(e.Value())
}

func TestLeaseHandsOverOnRelease(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder, other, _, _ := contend(t, s)
	require.False(t, held(other), "two holders")
	require.Equal(t, holder.Holder(), leaseValue(t, s, s.b))

	// Renewals keep it: after more than a TTL the holder still holds.
	time.Sleep(2 * leaseTTL) // asserting absence of a takeover: nothing to wait on
	require.False(t, held(other), "taken over while renewed")
	require.False(t, lost(holder))

	holder.Release()
	require.True(t, lost(holder))
	select {
	case <-other.Held():
	case <-s.ctx.Done():
		t.Fatal("released lease not taken over")
	}
	require.Equal(t, other.Holder(), leaseValue(t, s, s.b))
	other.Release()
	other.Release() // idempotent
}

func TestLeaseTakenOverWhenHolderStopsRenewing(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder, other, holderBus, otherBus := contend(t, s)

	// The holder's process loses its connection for good: it renews no
	// more and releases nothing.
	holderBus.KillConnForTest()
	select {
	case <-other.Held():
	case <-s.ctx.Done():
		t.Fatal("expired lease not taken over")
	}
	// The old holder had given up before the server let anyone else in.
	require.True(t, lost(holder), "two holders at once")
	require.Equal(t, other.Holder(), leaseValue(t, s, otherBus))
}

func TestLeaseRejectsBadArguments(t *testing.T) {
	t.Parallel()
	s := setup(t)
	_, err := s.b.Lease(s.ctx, "sched.uler", leaseTTL)
	require.Error(t, err)
	_, err = s.b.Lease(s.ctx, "scheduler", time.Millisecond)
	require.Error(t, err)
}

func TestCloseReleasesLease(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder, other, holderBus, _ := contend(t, s)
	require.NoError(t, holderBus.Close())
	require.True(t, lost(holder))
	select {
	case <-other.Held():
	case <-s.ctx.Done():
		t.Fatal("lease of a closed bus not taken over")
	}
}
