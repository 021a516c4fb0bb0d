package bus

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MinLeaseTTL is the shortest lease TTL: renewals go every TTL/3 and the
// server expires keys with some delay, so shorter ones flap.
const MinLeaseTTL = time.Second

const leaseKey = "holder"

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
// One Lease is one term: once Lost is closed it stays closed; contend
// again with a new Lease.
type Lease struct {
	name   string
	ttl    time.Duration
	holder string
	b      *Bus
	kv     jetstream.KeyValue

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
	l := &Lease{
		name:   name,
		ttl:    ttl,
		holder: cmp.Or(b.cfg.Name, "bus") + "/" + rand.Text(),
		b:      b,
		kv:     kv,
		held:   make(chan struct{}),
		lost:   make(chan struct{}),
	}
	lctx, lcancel := context.WithCancel(b.ctx)
	l.cancel = lcancel
	untrack, err := b.track(l.Release)
	if err != nil {
		lcancel()
		return nil, err
	}
	l.untrack = untrack
	if !b.goOwned(func() { l.run(lctx) }) {
		untrack()
		lcancel()
		return nil, ErrClosed
	}
	return l, nil
}

func (b *Bus) leaseBucket(ctx context.Context, name string, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      b.n.leaseBucket(name),
		Description: "agentfleet lease " + name,
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("lease %s: bucket: %w", name, err)
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

// Holder is this contender's identity as stored in the lease key.
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
	rev, sent, ok := l.acquire(ctx)
	if !ok {
		return
	}
	close(l.held)
	l.b.log.Info("lease acquired", "lease", l.name, "holder", l.holder)
	l.hold(ctx, rev, sent)
}

// acquire tries to create the key every TTL/4 until it succeeds or ctx
// ends. It returns the key's revision and when the winning request was
// sent: the server's TTL clock started no earlier than that.
func (l *Lease) acquire(ctx context.Context) (rev uint64, sent time.Time, ok bool) {
	for {
		sent = time.Now()
		cctx, cancel := context.WithTimeout(ctx, l.ttl/4)
		rev, err := l.kv.Create(cctx, leaseKey, []byte(l.holder))
		cancel()
		if err == nil {
			return rev, sent, true
		}
		if ctx.Err() != nil {
			return 0, time.Time{}, false
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
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
		case <-time.After(l.ttl / 4):
		}
	}
}

// hold renews the key every TTL/3 until ctx ends (then deletes it) or the
// lease is lost: taken over, or not renewed for 2/3 of the TTL since the
// last renewal that succeeded was sent.
func (l *Lease) hold(ctx context.Context, rev uint64, lastOK time.Time) {
	safe := l.ttl * 2 / 3
	renew := time.NewTicker(l.ttl / 3)
	defer renew.Stop()
	giveUp := time.NewTimer(time.Until(lastOK.Add(safe)))
	defer giveUp.Stop()
	for {
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
		}
		sent := time.Now()
		uctx, cancel := context.WithDeadline(ctx, lastOK.Add(safe))
		r, err := l.kv.Update(uctx, leaseKey, []byte(l.holder), rev)
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
