package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrClosed: the Bus (or the object it made) was closed.
	ErrClosed = errors.New("bus closed")
	// ErrNotConnected: the connection to NATS is down right now. The
	// client is reconnecting; retry the call (every publish here is
	// idempotent by message id).
	ErrNotConnected = errors.New("not connected to nats")
	// ErrNotReady: connected, but the streams have not been (re)ensured
	// since the last reconnect yet.
	ErrNotReady = errors.New("bus not ready")
)

// Bus is a connection to NATS with the fleet's streams ensured. It is safe
// for concurrent use; Close stops everything it started.
type Bus struct {
	cfg Config
	n   names
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream

	// ctx lives until Close; it is the parent of the maintainer and is
	// what long waits select on to notice Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // (re)connected: ensure streams again

	mu         sync.Mutex
	closed     bool
	epoch      uint64        // incremented at every (re)connect
	readyEpoch uint64        // the epoch whose streams are ensured
	up         chan struct{} // closed while connected
	ready      chan struct{} // closed while connected with streams ensured
	// conn is cancelled (cause ErrNotConnected) when the current
	// connection drops; a request tied to it is abandoned then instead of
	// waiting for a reply that died with the connection.
	conn       context.Context
	connCancel context.CancelCauseFunc
	closers    map[*closerEntry]struct{}

	beats heartbeats // KeepAlive's deliveries

	replicaWarnMu sync.Mutex
	replicaWarned map[string]int // stream -> the replicas last warned of

}

type closerEntry struct{ fn func() }

// Connect connects to NATS, ensures the streams exist with the configured
// shape (creating or updating them), and returns once they do. The
// connection then reconnects forever on its own. Without a deadline on ctx
// it gives up after Config.ConnectTimeout.
func Connect(ctx context.Context, cfg Config, opts ...Option) (*Bus, error) {
	var co connectOptions
	for _, o := range opts {
		o(&co)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(co.embedded != nil); err != nil {
		return nil, err
	}

	b := &Bus{
		cfg:     cfg,
		n:       names{prefix: cfg.Prefix, streamPrefix: cfg.StreamPrefix},
		log:     cfg.Logger.With("component", "bus"),
		kick:    make(chan struct{}, 1),
		up:      make(chan struct{}),
		ready:   make(chan struct{}),
		closers: make(map[*closerEntry]struct{}),

		replicaWarned: make(map[string]int),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.conn, b.connCancel = context.WithCancelCause(b.ctx)
	b.connCancel(ErrNotConnected) // not connected yet

	nc, url, err := co.dial(cfg, b.natsOptions())
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	b.nc = nc
	b.js, err = jetstream.New(nc,
		jetstream.WithDefaultTimeout(cfg.RequestTimeout),
		jetstream.WithPublishAsyncTimeout(cfg.RequestTimeout),
	)
	if err != nil {
		nc.Close()
		b.cancel()
		return nil, fmt.Errorf("jetstream: %w", err)
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	if err := b.firstEnsure(ctx, url); err != nil {
		nc.Close()
		b.cancel()
		return nil, err
	}
	b.goOwned(b.maintain)
	return b, nil
}

// replicasGrace is how long Connect retries a cluster's refusal to place
// the replicas before taking it for a cluster too small.
const replicasGrace = 10 * time.Second

// firstEnsure waits for the first connection and ensures the streams,
// retrying transient failures until ctx ends; a configuration the server
// rejects fails at once.
func (b *Bus) firstEnsure(ctx context.Context, url string) error {
	var last error
	var replicasSince time.Time
	for attempt := 0; ; attempt++ {
		_, up, _, _ := b.state()
		select {
		case <-up:
		case <-ctx.Done():
			if last == nil {
				last = errors.New("no connection")
			}
			return fmt.Errorf("connect to nats %s: %w (last error: %v)", url, ctx.Err(), last)
		}
		epoch, _, _, _ := b.state() // the connection that just came up
		if err := b.checkClustered(); err != nil {
			return fmt.Errorf("connect to nats %s: %w", url, err)
		}
		actx, cancel := b.apiCtx(ctx)
		last = opErr(actx, b.ensureStreams(actx))
		cancel()
		if last == nil {
			b.markReady(epoch)
			return nil
		}
		switch {
		case errors.Is(last, ErrReplicas):
			// A forming cluster cannot place replicas until its nodes
			// have met; one that still cannot after a while is too small.
			if replicasSince.IsZero() {
				replicasSince = time.Now()
			} else if time.Since(replicasSince) > replicasGrace {
				return fmt.Errorf("connect to nats %s: %w", url, last)
			}
		case isPermanent(last):
			return fmt.Errorf("connect to nats %s: %w", url, last)
		}
		select {
		case <-time.After(backoff(attempt)):
		case <-ctx.Done():
			return fmt.Errorf("connect to nats %s: %w (last error: %v)", url, ctx.Err(), last)
		}
	}
}

// maintain re-ensures the streams after every reconnect, so a server that
// came back with an empty store has them again before anyone pulls.
func (b *Bus) maintain() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kick:
		}
		for attempt := 0; ; attempt++ {
			epoch, _, _, _ := b.state()
			b.mu.Lock()
			done := b.readyEpoch == epoch
			b.mu.Unlock()
			if done {
				break
			}
			ctx, cancel := b.apiCtx(b.ctx)
			err := opErr(ctx, b.ensureStreams(ctx))
			cancel()
			if err == nil {
				b.markReady(epoch)
				break
			}
			b.log.Warn("ensure streams after reconnect", "err", err)
			select {
			case <-b.ctx.Done():
				return
			case <-b.kick:
			case <-time.After(backoff(attempt)):
			}
		}
	}
}

func (b *Bus) onConnect(nc *nats.Conn) {
	b.mu.Lock()
	b.epoch++
	if !isClosed(b.up) {
		close(b.up)
	}
	if b.conn.Err() != nil {
		b.conn, b.connCancel = context.WithCancelCause(b.ctx)
	}
	b.mu.Unlock()
	b.log.Info("nats connected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Bus) onDisconnect(_ *nats.Conn, err error) {
	b.mu.Lock()
	b.connCancel(ErrNotConnected)
	if isClosed(b.up) {
		b.up = make(chan struct{})
	}
	if isClosed(b.ready) {
		b.ready = make(chan struct{})
	}
	closed := b.closed
	b.mu.Unlock()
	if !closed {
		b.log.Warn("nats disconnected", "err", err)
	}
}

func (b *Bus) onAsyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	subj := ""
	if sub != nil {
		subj = sub.Subject
	}
	b.log.Warn("nats async error", "subject", subj, "err", err)
}

func (b *Bus) markReady(epoch uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.epoch != epoch || !isClosed(b.up) {
		return // reconnected or dropped meanwhile: that connection needs its own ensure
	}
	b.readyEpoch = epoch
	if !isClosed(b.ready) {
		close(b.ready)
	}
}

// state is a snapshot of the connection: the epoch, channels closed while
// connected and while ready, and a context that ends when this connection
// is lost.
func (b *Bus) state() (epoch uint64, up, ready <-chan struct{}, conn context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch, b.up, b.ready, b.conn
}

// waitUp blocks until connected, ctx ends (its error) or Close (ErrClosed).
func (b *Bus) waitUp(ctx context.Context) error {
	_, up, _, _ := b.state()
	select {
	case <-up:
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrClosed
	}
}

// Ready reports whether the Bus is connected, its streams are ensured
// since the last reconnect, and JetStream answers: what /readyz asks.
func (b *Bus) Ready(ctx context.Context) error {
	if b.ctx.Err() != nil {
		return ErrClosed
	}
	_, up, ready, _ := b.state()
	if !isClosed(up) {
		return ErrNotConnected
	}
	if !isClosed(ready) {
		return fmt.Errorf("%w: streams not ensured since reconnect", ErrNotReady)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("%w: jetstream account info: %w", ErrNotReady, err)
	}
	return nil
}

// WaitReady blocks until the Bus is connected with its streams ensured, or
// ctx ends. It is how a caller whose publish failed with ErrNotConnected
// waits before retrying.
func (b *Bus) WaitReady(ctx context.Context) error {
	_, _, ready, _ := b.state()
	select {
	case <-ready:
		return nil
	case <-b.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close releases leases, stops event streams and subscriptions made by
// this Bus, flushes outstanding acks and closes the connection. It is safe
// to call twice.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	closers := make([]*closerEntry, 0, len(b.closers))
	for c := range b.closers {
		closers = append(closers, c)
	}
	b.closers = nil
	b.mu.Unlock()

	for _, c := range closers {
		c.fn()
	}
	b.cancel()
	b.wg.Wait()
	if b.nc.IsConnected() {
		// Acks, Naks and InProgress are fire-and-forget; give them a
		// moment to leave the socket.
		_ = b.nc.FlushTimeout(time.Second)
	}
	b.nc.Close()
	return nil
}

// track registers fn to run at Close and returns a func that unregisters
// it (call it when the object closes on its own).
func (b *Bus) track(fn func()) (untrack func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	e := &closerEntry{fn: fn}
	b.closers[e] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.closers, e)
	}, nil
}

// goOwned runs fn on a goroutine that Close waits for; it reports false
// (and runs nothing) once the Bus is closed.
func (b *Bus) goOwned(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
	return true
}

// opCtx bounds one request made for a caller: by ctx, by RequestTimeout
// when ctx has no deadline, and by the connection current now. If that
// connection drops, the request is abandoned with cause ErrNotConnected
// rather than waiting out its deadline for a reply that died with it.
func (b *Bus) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	_, hasDeadline := ctx.Deadline()
	return b.boundCtx(ctx, !hasDeadline)
}

// apiCtx is opCtx for requests the bus makes on its own inside a longer
// wait (ensuring a consumer inside Next): always bounded by RequestTimeout.
func (b *Bus) apiCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return b.boundCtx(ctx, true)
}

func (b *Bus) boundCtx(ctx context.Context, timeout bool) (context.Context, context.CancelFunc) {
	_, _, _, conn := b.state()
	cancelTimeout := func() {}
	if timeout {
		ctx, cancelTimeout = context.WithTimeout(ctx, b.cfg.RequestTimeout)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(conn, func() { cancel(ErrNotConnected) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
		cancelTimeout()
	}
}

// opErr marks err as ErrNotConnected when ctx (from opCtx) was abandoned
// because the connection dropped, so callers know to retry.
func opErr(ctx context.Context, err error) error {
	if err != nil && !errors.Is(err, ErrNotConnected) && errors.Is(context.Cause(ctx), ErrNotConnected) {
		return fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	return err
}

// checkConn fails fast while disconnected, so callers see ErrNotConnected
// instead of whichever error the client produces mid-reconnect.
func (b *Bus) checkConn() error {
	if b.ctx.Err() != nil {
		return ErrClosed
	}
	if !b.nc.IsConnected() {
		return ErrNotConnected
	}
	return nil
}

// streamConfigs is the shape of every stream; ensureStreams applies it.
func (b *Bus) streamConfigs() []jetstream.StreamConfig {
	c := b.cfg
	queue := func(suffix string, q Queue, what string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        b.n.stream(suffix),
			Description: what,
			Subjects:    []string{b.n.queueAll(q)},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			Duplicates:  c.DedupWindow,
			Discard:     jetstream.DiscardOld,
			MaxMsgs:     -1,
			MaxBytes:    -1,
		}
	}
	limits := func(suffix string, subjects []string, maxAge, dedup time.Duration, what string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        b.n.stream(suffix),
			Description: what,
			Subjects:    subjects,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      maxAge,
			// The server requires the duplicate window to fit in MaxAge.
			Duplicates: min(dedup, maxAge),
			Discard:    jetstream.DiscardOld,
			MaxMsgs:    -1,
			MaxBytes:   -1,
		}
	}
	return []jetstream.StreamConfig{
		queue(streamRunQ, QueueRunQ, "agentfleet: turns to execute"),
		queue(streamWork, QueueWork, "agentfleet: turns dispatched to workers by the fair scheduler"),
		queue(streamSpill, QueueSpill, "agentfleet: turns the fair scheduler set aside beyond what it holds"),
		limits(streamEvents, []string{b.n.eventsAll(), b.n.batchesAll()}, c.EventsMaxAge, c.EventsDedupWindow, "agentfleet: run and batch events"),
		limits(streamDLQ, []string{b.n.dlqAll()}, c.DLQMaxAge, c.DedupWindow, "agentfleet: dead-lettered turns"),
	}
}

func (b *Bus) ensureStreams(ctx context.Context) error {
	for _, sc := range b.streamConfigs() {
		if err := b.applyStream(ctx, sc); err != nil {
			return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// ensureStream (re)creates the one stream called name, for code that found
// it missing between reconnects.
func (b *Bus) ensureStream(ctx context.Context, name string) error {
	for _, sc := range b.streamConfigs() {
		if sc.Name == name {
			if err := b.applyStream(ctx, sc); err != nil {
				return fmt.Errorf("ensure stream %s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("ensure stream %s: not one of ours", name)
}

// publish sends msg to stream (by name) with a message id and waits for
// the stream's ack. A stream that vanished (server restarted empty) is
// recreated and the publish retried once.
func (b *Bus) publish(ctx context.Context, msg *nats.Msg, stream, id string) (*jetstream.PubAck, error) {
	if err := b.checkConn(); err != nil {
		return nil, err
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithExpectStream(stream)}
	ack, err := b.js.PublishMsg(ctx, msg, opts...)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		if eerr := b.ensureStream(ctx, stream); eerr != nil {
			return nil, opErr(ctx, fmt.Errorf("%w (and %w)", err, eerr))
		}
		ack, err = b.js.PublishMsg(ctx, msg, opts...)
	}
	if err != nil {
		return nil, opErr(ctx, err)
	}
	return ack, nil
}

// isPermanent reports whether the server rejected a request for what it
// is (a config it will never accept) rather than for the moment.
func isPermanent(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10052, 10069, 10096: // invalid stream config, stream update error, stream not valid
		return true
	}
	return apiErr.Code == 400
}

// reconnectDelay backs off from 50ms to 2s with ±20% jitter, so a fleet
// that lost its server does not reconnect in lockstep.
func reconnectDelay(attempts int) time.Duration {
	return jitter(backoff(attempts))
}

func backoff(attempt int) time.Duration {
	const base, ceiling = 50 * time.Millisecond, 2 * time.Second
	d := base << min(max(attempt, 0), 6)
	return min(d, ceiling)
}

func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
