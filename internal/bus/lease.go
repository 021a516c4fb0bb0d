package bus

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinLeaseTTL is the shortest lease TTL: renewals go every TTL/3 and the
// server expires keys with some delay, so shorter ones flap.
const MinLeaseTTL = time.Second

const leaseKey = "holder"

// leaseToken names a contender: its probe subject's last token and the
// end of its Holder. A variable so that a test can know it in advance.
var leaseToken = rand.Text

// Lease is one term of leadership of a named singleton role (the fair
// scheduler) among any number of processes. It contends in the background
// until it acquires the lease, then renews it every TTL/3. The lease is a
// key in a KV bucket whose TTL is the lease TTL (bucket
// <StreamPrefix>LEASE_<name>), created with compare-and-set, so at most
// one contender holds it; if the holder stops renewing, the server expires
// the key and another contender takes over within about TTL + TTL/4.
//
// A holder that cannot renew for 2/3 of the TTL considers the lease lost
// before the server can hand it to anyone else, leaving a third of the TTL
// for clock-rate differences and delays. All contenders of one name must
// use the same TTL (the bucket has one).
//
// A holder that died is replaced sooner than its key expires. Every
// contender answers on a core NATS subject of its own,
// <p>.lease.<name>.<token>, named in the key's value (leaseRecord). A
// contender that finds the key taken asks the holder's subject; NATS
// answers "no responders" at once when no connection subscribes to it,
// which is what a killed process leaves behind. Two such answers
// probeConfirm apart, with the key unchanged in between (a live holder
// renews it), make the contender delete that revision of the key
// (compare-and-set) and create its own: a dead holder's role stays
// vacant for about TTL/10 after a successor first finds its key (a
// standby contender looks every TTL/4), not for the rest of a TTL.
// A holder that was only cut off from NATS looks dead too; it renews as
// soon as it reconnects, finds its revision gone and steps down, so two
// holders overlap for at most the time it takes to notice the reconnect.
// It could not reach the queues while it was cut off.
//
// One Lease is one term: once Lost is closed it stays closed; contend
// again with a new Lease.
type Lease struct {
	name   string
	ttl    time.Duration
	holder string
	probe  string // the core subject this contender answers on
	value  []byte // its leaseRecord, the key's value while it holds
	b      *Bus
	kv     jetstream.KeyValue
	sub    *nats.Subscription

	held    chan struct{}
	lost    chan struct{}
	cancel  context.CancelFunc
	untrack func()
	once    sync.Once
}

// Lease starts contending for the lease called name (letters, digits, '-'
// and '_'). It returns at once; wait on Held. Release it when done, or
// Close the Bus.
func (b *Bus) Lease(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("lease name: %w", err)
	}
	if ttl < MinLeaseTTL {
		return nil, fmt.Errorf("lease %s: ttl %s is shorter than %s", name, ttl, MinLeaseTTL)
	}
	if err := b.checkConn(); err != nil {
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	kv, err := b.leaseBucket(ctx, name, ttl)
	if err != nil {
		return nil, err
	}
	token := leaseToken()
	l := &Lease{
		name:   name,
		ttl:    ttl,
		holder: cmp.Or(b.cfg.Name, "bus") + "/" + token,
		probe:  b.n.leaseProbe(name, token),
		b:      b,
		kv:     kv,
		held:   make(chan struct{}),
		lost:   make(chan struct{}),
	}
	if l.value, err = json.Marshal(leaseRecord{Holder: l.holder, Probe: l.probe}); err != nil {
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	// Answer probes from the start: the key names this subject from the
	// moment it is created.
	if l.sub, err = b.nc.Subscribe(l.probe, func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
		return nil, fmt.Errorf("lease %s: subscribe %s: %w", name, l.probe, err)
	}
	// Have the server know the subscription before the key can name it,
	// or a contender's first probe may find nobody there. If this fails
	// (disconnected), the subscription goes out on reconnect, and the
	// second probe a takeover needs covers the gap.
	_ = b.nc.FlushWithContext(ctx)
	lctx, lcancel := context.WithCancel(b.ctx)
	l.cancel = lcancel
	untrack, err := b.track(l.Release)
	if err != nil {
		lcancel()
		_ = l.sub.Unsubscribe()
		return nil, err
	}
	l.untrack = untrack
	if !b.goOwned(func() { l.run(lctx) }) {
		untrack()
		lcancel()
		_ = l.sub.Unsubscribe()
		return nil, ErrClosed
	}
	return l, nil
}

// leaseRecord is the lease key's value: who holds it, and where the
// holder answers probes. A value that is not a leaseRecord (or names no
// probe subject) is never probed: its holder is waited out by the TTL.
type leaseRecord struct {
	Holder string `json:"holder"`
	Probe  string `json:"probe"`
}

func (n names) leaseProbe(name, token string) string {
	return n.prefix + ".lease." + name + "." + token
}

func (b *Bus) leaseBucket(ctx context.Context, name string, ttl time.Duration) (jetstream.KeyValue, error) {
	// An existing bucket keeps its replicas, as streams do (applyStream).
	replicas := b.cfg.Replicas
	if s, err := b.js.Stream(ctx, "KV_"+b.n.leaseBucket(name)); err == nil {
		if have := s.CachedInfo().Config.Replicas; have != replicas {
			b.warnReplicas(s.CachedInfo().Config.Name, have)
			replicas = have
		}
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      b.n.leaseBucket(name),
		Description: "agentfleet lease " + name,
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("lease %s: bucket: %w", name, b.replicasErr(err))
	}
	return kv, nil
}

// Held is closed once this Lease holds the lease.
func (l *Lease) Held() <-chan struct{} { return l.held }

// Lost is closed when this Lease no longer holds the lease and will not
// contend again: renewal failed, Release was called, or the Bus closed.
// It is closed too when a Lease released before acquiring stops
// contending.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Holder is this contender's identity, stored in the lease key's value
// while it holds the lease.
func (l *Lease) Holder() string { return l.holder }

// Release stops contending or holding; a held lease is deleted so another
// contender acquires it at once instead of after the TTL. It returns after
// the background goroutine ended. Safe to call twice.
func (l *Lease) Release() {
	l.once.Do(func() {
		l.untrack()
		l.cancel()
		<-l.lost
	})
}

func (l *Lease) run(ctx context.Context) {
	defer close(l.lost)
	// A contender that stops, holder or not, stops answering: a successor
	// must not be kept waiting by a term that has ended.
	defer func() { _ = l.sub.Unsubscribe() }()
	rev, sent, ok := l.acquire(ctx)
	if !ok {
		return
	}
	close(l.held)
	l.b.log.Info("lease acquired", "lease", l.name, "holder", l.holder)
	l.hold(ctx, rev, sent)
}

// acquire tries to create the key every TTL/4 until it succeeds or ctx
// ends, and sooner when the holder looks dead (probeHolder). It returns
// the key's revision and when the winning request was sent: the server's
// TTL clock started no earlier than that.
func (l *Lease) acquire(ctx context.Context) (rev uint64, sent time.Time, ok bool) {
	var suspect deadHolder
	for {
		sent = time.Now()
		cctx, cancel := context.WithTimeout(ctx, l.ttl/4)
		rev, err := l.kv.Create(cctx, leaseKey, l.value)
		cancel()
		if err == nil {
			return rev, sent, true
		}
		if ctx.Err() != nil {
			return 0, time.Time{}, false
		}
		wait := l.ttl / 4
		if errors.Is(err, jetstream.ErrKeyExists) {
			gctx, cancel := context.WithTimeout(ctx, l.ttl/4)
			entry, err := l.kv.Get(gctx, leaseKey)
			cancel()
			switch {
			case err != nil:
				suspect = deadHolder{} // gone or unreadable: contend again
			case string(entry.Value()) == string(l.value):
				if rev, sent, ok := l.adoptOwn(ctx, entry); ok {
					return rev, sent, true
				}
			default:
				suspect, wait = l.probeHolder(ctx, entry, suspect)
				if wait == 0 {
					continue
				}
			}
		} else {
			l.b.log.Debug("lease contend", "lease", l.name, "err", err)
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrBucketNotFound) {
				// The server came back without its store: bring the bucket back.
				bctx, cancel := context.WithTimeout(ctx, l.ttl/4)
				if kv, err := l.b.leaseBucket(bctx, l.name, l.ttl); err == nil {
					l.kv = kv
				}
				cancel()
			}
		}
		select {
		case <-ctx.Done():
			return 0, time.Time{}, false
		case <-time.After(wait):
		}
	}
}

// adoptOwn takes the key entry, which holds this contender's own record:
// an earlier Create was stored but its reply was lost (a timeout, a
// reconnect). Renewing it at once gives a revision and a send time to
// hold from; without that the key would only be waited out.
func (l *Lease) adoptOwn(ctx context.Context, entry jetstream.KeyValueEntry) (rev uint64, sent time.Time, ok bool) {
	sent = time.Now()
	uctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	rev, err := l.kv.Update(uctx, leaseKey, l.value, entry.Revision())
	cancel()
	if err != nil {
		return 0, time.Time{}, false
	}
	l.b.log.Info("lease key found already ours (a create whose reply was lost): holding it", "lease", l.name, "holder", l.holder)
	return rev, sent, true
}

// deadHolder is a holder that did not answer a probe: the key's revision
// then, and when the probe went. The zero value suspects nobody.
type deadHolder struct {
	rev   uint64
	since time.Time
}

// probeConfirm is how long a silent holder must stay silent, with its key
// unrenewed, before it is taken to be dead: long enough for a fresh
// subscription's interest to reach every server of a cluster, short
// against the TTL.
func (l *Lease) probeConfirm() time.Duration { return l.ttl / 10 }

// probeHolder asks the holder entry names whether it is alive. It returns who
// is suspected now and how long to wait before contending again: 0 when
// it has deleted a dead holder's key, so that the caller creates its own
// at once; probeConfirm while a silent holder awaits its second probe, or
// when the probe timed out (a holder killed a moment ago can still have
// its subscription at the server, which then delivers to a connection
// that is going away); TTL/4 when the holder answered. Only "no
// responders" counts against a holder; an answer, a timeout, an error or
// a value without a probe subject never does: the TTL still ends a term
// nobody renews.
func (l *Lease) probeHolder(ctx context.Context, entry jetstream.KeyValueEntry, suspect deadHolder) (deadHolder, time.Duration) {
	alive := l.ttl / 4
	var rec leaseRecord
	if json.Unmarshal(entry.Value(), &rec) != nil || rec.Probe == "" {
		return deadHolder{}, alive
	}
	_, err := l.b.nc.Request(rec.Probe, nil, l.probeConfirm())
	switch {
	case errors.Is(err, nats.ErrTimeout):
		return deadHolder{}, l.probeConfirm()
	case !errors.Is(err, nats.ErrNoResponders):
		return deadHolder{}, alive
	case suspect.rev != entry.Revision() || suspect.since.IsZero():
		return deadHolder{rev: entry.Revision(), since: time.Now()}, l.probeConfirm()
	case time.Since(suspect.since) < l.probeConfirm():
		return suspect, l.probeConfirm() - time.Since(suspect.since)
	}
	dctx, cancel := context.WithTimeout(ctx, l.ttl/4)
	err = l.kv.Delete(dctx, leaseKey, jetstream.LastRevision(entry.Revision()))
	cancel()
	if err != nil {
		// Renewed, taken or expired meanwhile: contend as usual.
		return deadHolder{}, alive
	}
	l.b.log.Info("lease holder gone: taking over before its key expires", "lease", l.name, "was", rec.Holder, "holder", l.holder)
	return deadHolder{}, 0
}

// hold renews the key every TTL/3, and at once after a reconnect, until
// ctx ends (then deletes it) or the lease is lost: taken over, or not
// renewed for 2/3 of the TTL since the last renewal that succeeded was
// sent. The renewal after a reconnect is how a holder that successors
// took for dead (probeHolder) learns it was replaced.
func (l *Lease) hold(ctx context.Context, rev uint64, lastOK time.Time) {
	safe := l.ttl * 2 / 3
	renew := time.NewTicker(l.ttl / 3)
	defer renew.Stop()
	giveUp := time.NewTimer(time.Until(lastOK.Add(safe)))
	defer giveUp.Stop()
	epoch, _, _, _ := l.b.state()
	for {
		// While connected, wait for the connection to drop; while
		// dropped, for it to come back, then renew.
		_, up, _, conn := l.b.state()
		connChange := conn.Done()
		if !isClosed(up) {
			connChange = up
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), l.b.cfg.RequestTimeout)
			err := l.kv.Delete(dctx, leaseKey, jetstream.LastRevision(rev))
			cancel()
			l.b.log.Info("lease released", "lease", l.name, "holder", l.holder, "err", err)
			return
		case <-giveUp.C:
			l.b.log.Warn("lease lost: could not renew in time", "lease", l.name, "holder", l.holder)
			return
		case <-renew.C:
		case <-connChange:
			if now, _, _, _ := l.b.state(); now == epoch {
				continue // dropped: wait for the reconnect
			}
		}
		epoch, _, _, _ = l.b.state() // this renewal covers every reconnect so far
		sent := time.Now()
		uctx, cancel := context.WithDeadline(ctx, lastOK.Add(safe))
		r, err := l.kv.Update(uctx, leaseKey, l.value, rev)
		cancel()
		switch {
		case err == nil:
			rev, lastOK = r, sent
			giveUp.Reset(time.Until(lastOK.Add(safe)))
		case ctx.Err() != nil:
			// Released meanwhile: the select above deletes the key.
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound),
			errors.Is(err, jetstream.ErrKeyDeleted):
			l.b.log.Warn("lease lost: taken over or expired", "lease", l.name, "holder", l.holder, "err", err)
			return
		default:
			l.b.log.Debug("lease renew", "lease", l.name, "err", err)
		}
	}
}
