package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SourceOption refines a TurnSource.
type SourceOption func(*sourceOptions)

type sourceOptions struct {
	tenant           string
	ackWait          time.Duration
	maxAckPending    int
	resetOnReconnect bool
}

// ResetOnReconnect makes the source Reset its consumer whenever it is
// re-ensured on a new connection. A message the server delivered while
// the connection was dying is lost in transit but still counted as
// delivered: with a long HoldFor it would not come back for that long. The
// sole holder of a source (the scheduler) reclaims such messages at once
// this way; it must tolerate getting again the turns it still holds.
func ResetOnReconnect() SourceOption {
	return func(o *sourceOptions) { o.resetOnReconnect = true }
}

// HoldFor sets the source's AckWait: how long a delivery may stay
// un-acked before the server redelivers it. A scheduler that holds turns
// in memory until it forwards them sets it long; workers keep the
// default, heartbeating while they run a turn.
func HoldFor(ackWait time.Duration) SourceOption {
	return func(o *sourceOptions) { o.ackWait = ackWait }
}

// MaxHeld bounds the un-acked deliveries of the source across its users
// (the consumer's MaxAckPending).
func MaxHeld(n int) SourceOption {
	return func(o *sourceOptions) { o.maxAckPending = n }
}

// FilterTenant makes the source deliver only turns of one tenant, e.g. for
// a scheduler that keeps a source per tenant. On a work queue the filters of
// different durables must not overlap; the server rejects a source that
// would.
func FilterTenant(tenant string) SourceOption {
	return func(o *sourceOptions) { o.tenant = tenant }
}

// TurnSource pulls turns from one queue through one durable pull consumer
// that every worker of the fleet shares. It is safe for concurrent use:
// each slot of a worker calls Next on its own.
type TurnSource struct {
	b       *Bus
	q       Queue
	stream  string
	durable string
	filter  string
	opts    sourceOptions

	ensureMu sync.Mutex // one (re)creation at a time
	mu       sync.Mutex
	cons     jetstream.Consumer
	epoch    uint64 // the connection epoch cons was ensured on
}

// TurnSource opens (creating or updating) the durable consumer named
// durable on queue q. Workers use one name for the whole fleet, e.g.
// "workers" on QueueWork, and the scheduler another on QueueRunQ.
func (b *Bus) TurnSource(ctx context.Context, q Queue, durable string, opts ...SourceOption) (*TurnSource, error) {
	var o sourceOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := q.valid(); err != nil {
		return nil, fmt.Errorf("turn source: %w", err)
	}
	if err := validName(durable); err != nil {
		return nil, fmt.Errorf("turn source durable: %w", err)
	}
	if o.ackWait < 0 || o.maxAckPending < 0 {
		return nil, fmt.Errorf("turn source %s: HoldFor and MaxHeld must not be negative", durable)
	}
	s := &TurnSource{b: b, q: q, stream: b.n.queueStream(q), durable: durable, filter: b.n.queueAll(q), opts: o}
	if o.tenant != "" {
		if err := validToken(o.tenant); err != nil {
			return nil, fmt.Errorf("turn source tenant filter: %w", err)
		}
		s.filter = b.n.queueSubject(q, o.tenant, "")
	}
	// Ride out a reconnect in progress, but not a configuration the
	// server rejects (e.g. a filter overlapping another durable's).
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.RequestTimeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		if err := b.waitUp(ctx); err != nil {
			return nil, fmt.Errorf("turn source %s on %s: %w", durable, s.stream, err)
		}
		epoch, _, _, _ := b.state()
		_, err := s.consumer(ctx, epoch)
		if err == nil {
			return s, nil
		}
		if isPermanent(err) || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-time.After(backoff(attempt)):
		case <-ctx.Done():
			return nil, err
		}
	}
}

func (s *TurnSource) consumerConfig() jetstream.ConsumerConfig {
	c := s.b.cfg
	if s.opts.ackWait > 0 {
		c.AckWait = s.opts.ackWait
	}
	if s.opts.maxAckPending > 0 {
		c.MaxAckPending = s.opts.maxAckPending
	}
	return jetstream.ConsumerConfig{
		Durable:       s.durable,
		Description:   "agentfleet turn source on " + s.q.String(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		// The fleet dead-letters by itself (see Delivery.LastAttempt), so
		// the server must never drop a message silently.
		MaxDeliver:    -1,
		MaxAckPending: c.MaxAckPending,
		MaxWaiting:    c.MaxWaiting,
		FilterSubject: s.filter,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// consumer returns the consumer, (re)ensuring it when it was never made,
// was found missing, or the connection is new since it was ensured: a
// server that restarted with an empty store has lost it.
func (s *TurnSource) consumer(ctx context.Context, epoch uint64) (jetstream.Consumer, error) {
	if c := s.current(epoch); c != nil {
		return c, nil
	}
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	if c := s.current(epoch); c != nil {
		return c, nil // another caller ensured it meanwhile
	}
	ctx, cancel := s.b.apiCtx(ctx)
	defer cancel()
	s.mu.Lock()
	reconnected := s.epoch != 0 && s.epoch != epoch
	s.mu.Unlock()
	if reconnected && s.opts.resetOnReconnect {
		if err := s.b.js.DeleteConsumer(ctx, s.stream, s.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, opErr(ctx, fmt.Errorf("reset consumer %s on %s after reconnect: %w", s.durable, s.stream, err))
		}
	}
	cfg := s.consumerConfig()
	cons, err := s.b.js.CreateOrUpdateConsumer(ctx, s.stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = s.b.ensureStream(ctx, s.stream); err == nil {
			cons, err = s.b.js.CreateOrUpdateConsumer(ctx, s.stream, cfg)
		}
	}
	if err != nil {
		return nil, opErr(ctx, fmt.Errorf("ensure consumer %s on %s: %w", s.durable, s.stream, err))
	}
	s.mu.Lock()
	s.cons, s.epoch = cons, epoch
	s.mu.Unlock()
	return cons, nil
}

// Reset deletes and re-creates the source's consumer. Deliveries that a
// previous holder left un-acked are then redelivered at once instead of
// after their AckWait: a scheduler taking over from a dead one calls it
// to reclaim the turns its predecessor held in memory. Nothing queued is
// lost: on a work queue the messages stay until acked.
func (s *TurnSource) Reset(ctx context.Context) error {
	s.ensureMu.Lock()
	actx, cancel := s.b.apiCtx(ctx)
	err := s.b.js.DeleteConsumer(actx, s.stream, s.durable)
	cancel()
	s.ensureMu.Unlock()
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return opErr(ctx, fmt.Errorf("reset consumer %s on %s: %w", s.durable, s.stream, err))
	}
	s.invalidate()
	epoch, _, _, _ := s.b.state()
	_, err = s.consumer(ctx, epoch)
	return err
}

func (s *TurnSource) current(epoch uint64) jetstream.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cons != nil && s.epoch == epoch {
		return s.cons
	}
	return nil
}

func (s *TurnSource) invalidate() {
	s.mu.Lock()
	s.cons = nil
	s.mu.Unlock()
}

// errConnLost ends a pull whose connection dropped: its pull request died
// with the connection and a new one is needed.
var errConnLost = errors.New("connection lost during pull")

// Next blocks until it holds one turn or ctx ends. It asks the server for
// exactly one message per call, so the caller holds no more un-acked turns
// than it has called Next for. It rides out disconnects, server restarts
// and a vanished stream or consumer; it returns only a delivery, ctx's
// error, ErrClosed, or an error the server will keep giving (a consumer
// configuration it rejects).
func (s *TurnSource) Next(ctx context.Context) (*Delivery, error) {
	for attempt := 0; ; {
		if err := s.b.waitUp(ctx); err != nil {
			return nil, err
		}
		// Read after waiting: the epoch and context of the connection
		// that is up now.
		epoch, _, _, conn := s.b.state()
		cons, err := s.consumer(ctx, epoch)
		if err == nil {
			var ds []*Delivery
			ds, err = s.pull(ctx, cons, 1, s.b.cfg.PullExpiry, conn.Done())
			if len(ds) == 1 {
				return ds[0], nil
			}
			if err == nil {
				attempt = 0
				continue // the pull expired empty (or held only a malformed envelope)
			}
		}
		switch {
		case errors.Is(err, ErrClosed):
			return nil, err
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, errConnLost):
			continue // wait for the next connection
		case isPermanent(err):
			return nil, err
		}
		s.b.log.Debug("pull turn", "queue", s.q.String(), "durable", s.durable, "err", err)
		select {
		case <-time.After(backoff(attempt)):
			attempt++
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.b.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// Fetch pulls up to max turns, waiting at most wait for them, for a caller
// that dispatches in batches (the fair scheduler). Every returned delivery
// is the caller's to settle. It returns no deliveries and a nil error when
// wait passed with nothing queued.
func (s *TurnSource) Fetch(ctx context.Context, max int, wait time.Duration) ([]*Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("fetch %d turns: max must be at least 1", max)
	}
	if wait < 10*time.Millisecond {
		return nil, fmt.Errorf("fetch wait %s: use at least 10ms", wait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.b.waitUp(wctx); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("fetch turns: %w", ErrNotConnected)
		}
		return nil, err
	}
	epoch, _, _, conn := s.b.state()
	cons, err := s.consumer(ctx, epoch)
	if err != nil {
		return nil, err
	}
	ds, err := s.pull(ctx, cons, max, time.Until(deadline(wctx)), conn.Done())
	if errors.Is(err, errConnLost) && len(ds) == 0 {
		return nil, fmt.Errorf("fetch turns: %w", ErrNotConnected)
	}
	return ds, err
}

// noWait, as a pull's expiry, asks for only what is queued now.
const noWait = time.Duration(1<<63 - 1)

// FetchReady pulls up to max turns that are queued now, without waiting
// for more: after a Next returned one, a caller that dispatches in
// batches (the scheduler) drains the rest this way, so a busy queue is
// read a batch per round trip while an idle one still answers at once.
// It may return no deliveries.
func (s *TurnSource) FetchReady(ctx context.Context, max int) ([]*Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("fetch %d turns: max must be at least 1", max)
	}
	if err := s.b.checkConn(); err != nil {
		return nil, err
	}
	epoch, _, _, conn := s.b.state()
	cons, err := s.consumer(ctx, epoch)
	if err != nil {
		return nil, err
	}
	ds, err := s.pull(ctx, cons, max, noWait, conn.Done())
	if errors.Is(err, errConnLost) && len(ds) == 0 {
		return nil, fmt.Errorf("fetch turns: %w", ErrNotConnected)
	}
	if errors.Is(err, jetstream.ErrNoMessages) {
		err = nil
	}
	return ds, err
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// pull issues one pull request for up to max messages, expiring after
// expiry, and decodes what arrives. A pull abandoned because ctx ended, the
// connection dropped or the Bus closed has its late messages Nak'ed, so
// they go to another worker now rather than after AckWait.
func (s *TurnSource) pull(ctx context.Context, cons jetstream.Consumer, max int, expiry time.Duration, lost <-chan struct{}) ([]*Delivery, error) {
	if expiry < 10*time.Millisecond {
		return nil, nil
	}
	fctx, cancel := context.WithTimeout(ctx, expiry)
	defer cancel()
	var batch jetstream.MessageBatch
	var err error
	if expiry == noWait {
		batch, err = cons.FetchNoWait(max)
	} else {
		batch, err = cons.Fetch(max, jetstream.FetchContext(fctx))
	}
	if err != nil {
		return nil, s.pullErr(err)
	}
	var ds []*Delivery
	abandon := func(cause error) ([]*Delivery, error) {
		cancel()
		for _, d := range ds {
			_ = d.msg.Nak()
		}
		for m := range batch.Messages() {
			_ = m.Nak()
		}
		return nil, cause
	}
	msgs := batch.Messages()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					return abandon(ctx.Err())
				}
				berr := batch.Error()
				if berr == nil || errors.Is(berr, context.DeadlineExceeded) {
					return ds, nil // expired: what we have is all there is
				}
				if len(ds) > 0 {
					return ds, nil
				}
				return nil, s.pullErr(berr)
			}
			if ctx.Err() != nil {
				_ = m.Nak()
				continue
			}
			if d := s.decode(ctx, m); d != nil {
				ds = append(ds, d)
			}
		case <-lost:
			return abandon(errConnLost)
		case <-s.b.ctx.Done():
			return abandon(ErrClosed)
		}
	}
}

// pullErr recognises the signs that the consumer or its stream vanished
// (deleted, or a server restarted without its store) and forgets the
// consumer so the next pull re-creates it.
func (s *TurnSource) pullErr(err error) error {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		s.invalidate()
	}
	if errors.Is(err, nats.ErrConnectionClosed) && s.b.ctx.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("pull from %s/%s: %w", s.stream, s.durable, err)
}

// decode turns a message into a Delivery. An envelope that does not
// decode, or disagrees with its subject, can never be run: it is
// dead-lettered here and nil returned.
func (s *TurnSource) decode(ctx context.Context, m jetstream.Msg) *Delivery {
	d := &Delivery{Queue: s.q, msg: m, src: s}
	if md, err := m.Metadata(); err == nil {
		d.NumDelivered = md.NumDelivered
		d.StreamSeq = md.Sequence.Stream
		d.Enqueued = md.Timestamp
		d.Pending = md.NumPending
	}
	var bad error
	if h := m.Headers(); h != nil {
		d.Turn.Traceparent = h.Get(traceHeader)
		d.PriorAttempts, _ = strconv.ParseUint(h.Get(HeaderAttempts), 10, 64)
		d.HandedBack, _ = strconv.ParseUint(h.Get(HeaderHandedBack), 10, 64)
	}
	if err := json.Unmarshal(m.Data(), &d.Turn); err != nil {
		bad = fmt.Errorf("malformed turn envelope: %w", err)
	} else if err := d.Turn.validate(); err != nil {
		bad = fmt.Errorf("invalid turn envelope: %w", err)
	} else if want := s.b.n.queueSubject(s.q, d.Turn.Tenant, d.Turn.RunID); m.Subject() != want {
		bad = fmt.Errorf("turn envelope for %s/%s arrived on subject %s", d.Turn.Tenant, d.Turn.RunID, m.Subject())
	}
	if bad == nil {
		return d
	}
	if err := d.DeadLetter(ctx, bad.Error()); err != nil {
		s.b.log.Warn("dead-letter malformed turn", "subject", m.Subject(), "reason", bad, "err", err)
		_ = m.NakWithDelay(s.b.cfg.AckWait)
	}
	return nil
}

// Backlog is a TurnSource's view of its queue.
type Backlog struct {
	// Undelivered messages matching the source's filter.
	Undelivered uint64
	// AckPending messages are delivered and not yet acked: turns running.
	AckPending int
	// Redelivered counts un-acked messages delivered more than once.
	Redelivered int
	// Waiting is the number of pull requests parked at the server. A
	// worker parks one at a time whatever its free slots, so this counts
	// idle workers; their slots are in their announcements (TallySlots).
	Waiting int
	// LastDelivered is the stream sequence of the last message the
	// consumer delivered.
	LastDelivered uint64
}

// Pending reads the consumer's state, e.g. for a scheduler that keeps
// AF_WORK shallow.
func (s *TurnSource) Pending(ctx context.Context) (Backlog, error) {
	ctx, cancel := s.b.opCtx(ctx)
	defer cancel()
	for try := 0; ; try++ {
		epoch, _, _, _ := s.b.state()
		cons, err := s.consumer(ctx, epoch)
		if err != nil {
			return Backlog{}, err
		}
		info, err := cons.Info(ctx)
		if errors.Is(err, jetstream.ErrConsumerNotFound) && try == 0 {
			s.invalidate()
			continue
		}
		if err != nil {
			return Backlog{}, fmt.Errorf("consumer info %s/%s: %w", s.stream, s.durable, err)
		}
		return Backlog{
			Undelivered:   info.NumPending,
			AckPending:    info.NumAckPending,
			Redelivered:   info.NumRedelivered,
			Waiting:       info.NumWaiting,
			LastDelivered: info.Delivered.Stream,
		}, nil
	}
}
