package bus_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

const leaseTTL = time.Second

// contend starts two contenders in two "processes" and returns them
// holder first.
func contend(t *testing.T, s bundle) (holder, other *bus.Lease, holderBus, otherBus *bus.Bus) {
	t.Helper()
	return contendFor(t, s, leaseTTL)
}

func contendFor(t *testing.T, s bundle, ttl time.Duration) (holder, other *bus.Lease, holderBus, otherBus *bus.Bus) {
	t.Helper()
	b2 := bustest.Connect(t, s.e)
	l1, err := s.b.Lease(s.ctx, "scheduler", ttl)
	require.NoError(t, err)
	l2, err := b2.Lease(s.ctx, "scheduler", ttl)
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

func leaseKV(t *testing.T, s bundle, b *bus.Bus) jetstream.KeyValue {
	t.Helper()
	kv, err := b.JetStreamForTest().KeyValue(s.ctx, b.LeaseBucketForTest("scheduler"))
	require.NoError(t, err)
	return kv
}

// leaseValue is the holder named in the lease key.
func leaseValue(t *testing.T, s bundle, b *bus.Bus) string {
	t.Helper()
	holder, _ := leaseRecord(t, s, b)
	return holder
}

// leaseRecord is the holder named in the lease key and the subject it
// answers probes on.
func leaseRecord(t *testing.T, s bundle, b *bus.Bus) (holder, probe string) {
	t.Helper()
	e, err := leaseKV(t, s, b).Get(s.ctx, "holder")
	require.NoError(t, err)
	var rec struct {
		Holder string `json:"holder"`
		Probe  string `json:"probe"`
	}
	require.NoError(t, json.Unmarshal(e.Value(), &rec), "lease value %q", e.Value())
	require.NotEmpty(t, rec.Probe, "lease value %q names no probe subject", e.Value())
	return rec.Holder, rec.Probe
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
	// The holder's process is stuck: it renews no more and releases
	// nothing, but its probe subject is still subscribed (here from a
	// connection of its own), answering or, too busy, not.
	for name, answer := range map[string]bool{"answering": true, "silent": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			holder, other, holderBus, otherBus := contend(t, s)
			_, probe := leaseRecord(t, s, holderBus)
			nc, err := nats.Connect(s.e.ClientURL())
			require.NoError(t, err)
			defer nc.Close()
			_, err = nc.Subscribe(probe, func(m *nats.Msg) {
				if answer {
					_ = m.Respond(nil)
				}
			})
			require.NoError(t, err)
			require.NoError(t, nc.Flush())
			holderBus.KillConnForTest()
			select {
			case <-other.Held():
			case <-s.ctx.Done():
				t.Fatal("expired lease not taken over")
			}
			// Only the key's expiry let the other in: the old holder had
			// given up before.
			require.True(t, lost(holder), "two holders at once")
			require.Equal(t, other.Holder(), leaseValue(t, s, otherBus))
		})
	}
}

func TestLeaseTakenOverSoonWhenHolderDies(t *testing.T) {
	t.Parallel()
	s := setup(t)
	// A TTL long enough that the key cannot expire within the bound
	// below: only the probe can hand the lease over that fast. The
	// contender looks every TTL/4 and confirms a silent holder TTL/10
	// later, 7s at worst here, plus round trips on a loaded machine.
	const ttl = 20 * time.Second
	_, other, holderBus, otherBus := contendFor(t, s, ttl)

	// The holder's process is killed: its connection, and with it the
	// subscription its probe subject had, are gone. (That a holder cut
	// off gives up in time is TestLeaseTakenOverWhenHolderStopsRenewing.)
	killed := time.Now()
	holderBus.KillConnForTest()
	select {
	case <-other.Held():
	case <-time.After(ttl / 2):
		// Its last renewal was at most TTL/3 before the kill, so its key
		// lives at least 2/3 of the TTL after it: expiry cannot win.
		t.Fatalf("dead holder not replaced within %s of a %s TTL", ttl/2, ttl)
	}
	t.Logf("taken over %s after the kill", time.Since(killed).Round(time.Millisecond))
	require.Equal(t, other.Holder(), leaseValue(t, s, otherBus))
}

func TestLeaseWithoutProbeSubjectIsWaitedOut(t *testing.T) {
	t.Parallel()
	s := setup(t)
	const ttl = 2 * time.Second
	// A holder that names no probe subject (a plain identity, as
	// written before probes existed) may be alive: only the TTL ends it.
	l, err := s.b.Lease(s.ctx, "scheduler", ttl) // creates the bucket
	require.NoError(t, err)
	<-l.Held()
	kv := leaseKV(t, s, s.b)
	l.Release()
	_, err = kv.Create(s.ctx, "holder", []byte("dispatcher/OLDVERSION"))
	require.NoError(t, err)
	created := time.Now()

	contender, err := s.b.Lease(s.ctx, "scheduler", ttl)
	require.NoError(t, err)
	defer contender.Release()
	select {
	case <-contender.Held():
	case <-s.ctx.Done():
		t.Fatal("expired lease not taken over")
	}
	require.GreaterOrEqual(t, time.Since(created), ttl, "a holder without a probe subject was replaced before its key expired")
}

// Not parallel: it fixes the package's lease token.
func TestLeaseContenderAdoptsTheKeyItAlreadyWrote(t *testing.T) {
	s := setup(t)
	const ttl = 10 * time.Second
	bus.SetLeaseTokenForTest(t, "OWNTOKEN")
	first, err := s.b.Lease(s.ctx, "scheduler", ttl)
	require.NoError(t, err)
	<-first.Held()
	kv := leaseKV(t, s, s.b)
	written, err := kv.Get(s.ctx, "holder")
	require.NoError(t, err)
	// Its process loses the connection without releasing anything. The
	// key it wrote is what a contender whose Create was stored, but whose
	// reply was lost, finds in its way: its own record.
	s.b.KillConnForTest()
	again := bustest.Connect(t, s.e)
	start := time.Now()
	l, err := again.Lease(s.ctx, "scheduler", ttl)
	require.NoError(t, err)
	defer l.Release()
	select {
	case <-l.Held():
	case <-time.After(ttl / 20):
		// Not a probe takeover (its own subject is not probed, and that
		// would take TTL/10), nor an expiry.
		t.Fatalf("own key not adopted within %s", ttl/20)
	}
	t.Logf("adopted after %s", time.Since(start).Round(time.Millisecond))
	now, err := leaseKV(t, s, again).Get(s.ctx, "holder")
	require.NoError(t, err)
	require.Equal(t, string(written.Value()), string(now.Value()))
	require.Greater(t, now.Revision(), written.Revision(), "adopted by renewing it")
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
