package bus

import (
	"cmp"
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

// Turn is the envelope of one turn to execute, the payload of every message
// on the turn queues: {"run_id","tenant","turn","wake"}, and "direct" on
// some in AF_WORK. Everything else about the run is in the store; the
// message only says which turn is due.
type Turn struct {
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant"`
	// Turn is the number of the turn to execute, from 1.
	Turn int `json:"turn"`
	// Wake is agentfleet.Run.Wake: how often the run was parked and
	// resumed. It makes a resumed turn's message id differ from the
	// parked one, which the duplicate window would otherwise drop.
	Wake int `json:"wake"`
	// Direct is set by the scheduler on a turn it forwarded while no
	// other tenant's turn waited for the workers: the turn after it may
	// skip the scheduler, run at once by the same worker or sent straight
	// to AF_WORK (see ContinueTurn).
	// The message id does not include it.
	Direct bool `json:"direct,omitempty"`
	// Retried is set on a turn that a redelivery of the turn before it
	// published: an attempt of this turn may have run already, in place
	// under that earlier message, and recorded its model reply, so the
	// worker looks for that reply even on this message's first delivery
	// rather than pay the model again. The message id does not include
	// it.
	Retried bool `json:"retried,omitempty"`
	// Batch marks a turn of a batch run: the scheduler serves a tenant's
	// other turns first (batch runs are its lower priority class). The
	// message id does not include it.
	Batch bool `json:"batch,omitempty"`
	// Traceparent is the W3C trace context of the turn that sent this
	// one, carried as the message's traceparent header (not in the
	// envelope, nor in the message id).
	Traceparent string `json:"-"`
}

// traceHeader is the NATS header that carries Turn.Traceparent.
const traceHeader = "traceparent"

// MsgID is the JetStream message id of the turn: "<run>/turn/<n>", plus
// "/w<wake>" for a resumed turn. Publishing the same turn twice within the
// duplicate window stores it once.
func (t Turn) MsgID() string {
	id := t.RunID + "/turn/" + strconv.Itoa(t.Turn)
	if t.Wake > 0 {
		id += "/w" + strconv.Itoa(t.Wake)
	}
	return id
}

func (t Turn) validate() error {
	if err := validRun(t.Tenant, t.RunID); err != nil {
		return err
	}
	if t.Turn < 1 {
		return fmt.Errorf("turn number %d: turns count from 1", t.Turn)
	}
	if t.Wake < 0 {
		return fmt.Errorf("wake %d: must not be negative", t.Wake)
	}
	return nil
}

// EnqueueTurn publishes t to AF_RUNQ and waits for the stream's ack. The
// dispatcher enqueues turn 1, a worker turn n+1, the budget resumer a
// parked turn. A duplicate (same MsgID within the window) is accepted and
// dropped by the server.
func (b *Bus) EnqueueTurn(ctx context.Context, t Turn) error {
	return b.publishTurn(ctx, QueueRunQ, t)
}

// publishWindow bounds the publishes awaiting their acks at once in a
// bulk publish, so a 100,000-turn batch holds a window's futures, not
// 100,000, and a slow server acks a window within the ack timeout.
// publishAttempts is how often a bulk publish sends what was not acked
// (ids make the repeats harmless).
const (
	publishWindow   = 256
	publishAttempts = 10
)

// EnqueueTurns publishes ts to AF_RUNQ like EnqueueTurn, asynchronously
// in windows of publishWindow, and waits for every ack, sending again
// what was not acked. A nil error means all are stored; on error some
// may be, and publishing them again is safe.
func (b *Bus) EnqueueTurns(ctx context.Context, ts []Turn) error {
	for _, t := range ts {
		if err := t.validate(); err != nil {
			return fmt.Errorf("publish turn to %s: %w", QueueRunQ, err)
		}
	}
	return inWindows(ctx, ts, func(window []Turn) []error {
		_, errs := b.publishTurns(ctx, QueueRunQ, window)
		return errs
	})
}

// inWindows publishes items a window at a time with publish, which
// returns each item's outcome, up to publishAttempts times for those that
// failed.
func inWindows[T any](ctx context.Context, items []T, publish func([]T) []error) error {
	for from := 0; from < len(items); from += publishWindow {
		window := items[from:min(len(items), from+publishWindow)]
		for attempt := 1; ; attempt++ {
			errs := publish(window)
			var failed []T
			var first error
			for i, err := range errs {
				if err != nil {
					failed = append(failed, window[i])
					first = cmp.Or(first, err)
				}
			}
			if len(failed) == 0 {
				break
			}
			if attempt == publishAttempts || ctx.Err() != nil {
				return fmt.Errorf("%d of %d not stored after %d attempts: %w", len(failed), len(window), attempt, first)
			}
			window = failed
			// The connection's async window may be full of other
			// publishes (the workers' on a shared connection): give
			// their acks time to come back.
			select {
			case <-time.After(min(time.Duration(attempt)*250*time.Millisecond, 2*time.Second)):
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// ForwardTurn publishes t to AF_WORK, the queue workers pull from; the fair
// scheduler calls it for the turn it picked from AF_RUNQ (before acking that
// one), with the same message id so a forward retried after a crash is
// stored once.
func (b *Bus) ForwardTurn(ctx context.Context, t Turn) error {
	return b.publishTurn(ctx, QueueWork, t)
}

// ContinueTurn publishes next, the turn after prev, where prev's message
// says: straight to AF_WORK when the scheduler marked prev Direct, to
// AF_RUNQ otherwise. next itself is never Direct, so a run that keeps
// going passes through the scheduler at least every other turn, and a
// tenant that arrives while another's turns skip it waits behind at most
// one skipped turn per turn then in flight. It reports whether next went
// straight to AF_WORK. A redelivered prev publishes next where the first
// delivery did, so the message id deduplicates it.
func (b *Bus) ContinueTurn(ctx context.Context, prev, next Turn) (direct bool, err error) {
	next.Direct = false
	if prev.Direct {
		return true, b.publishTurn(ctx, QueueWork, next)
	}
	return false, b.publishTurn(ctx, QueueRunQ, next)
}

// ForwardTurns publishes turns to AF_WORK at once and waits for every
// ack: the scheduler forwards a batch with one round trip's wait instead
// of one per turn. errs[i] is the outcome of ts[i], and seqs holds the
// stream sequences of those stored; the message ids are the same as
// ForwardTurn's, so a repeat is deduplicated.
func (b *Bus) ForwardTurns(ctx context.Context, ts []Turn) (seqs []uint64, errs []error) {
	return b.publishTurns(ctx, QueueWork, ts)
}

// SpillTurns publishes turns to AF_SPILL at once and waits for every ack,
// like ForwardTurns: the scheduler keeps there the turns of a tenant that
// holds more than its share of what it can hold in memory.
func (b *Bus) SpillTurns(ctx context.Context, ts []Turn) (errs []error) {
	_, errs = b.publishTurns(ctx, QueueSpill, ts)
	return errs
}

func (b *Bus) publishTurns(ctx context.Context, q Queue, ts []Turn) (seqs []uint64, errs []error) {
	errs = make([]error, len(ts))
	if err := b.checkConn(); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("publish turn %s to %s: %w", ts[i].MsgID(), q, err)
		}
		return nil, errs
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	stream := b.n.queueStream(q)
	futures := make([]jetstream.PubAckFuture, len(ts))
	seqs = make([]uint64, 0, len(ts))
	for i, t := range ts {
		msg, err := b.turnMsg(q, t)
		if err != nil {
			errs[i] = fmt.Errorf("publish turn to %s: %w", q, err)
			continue
		}
		futures[i], errs[i] = b.js.PublishMsgAsync(msg, jetstream.WithMsgID(t.MsgID()), jetstream.WithExpectStream(stream))
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			seqs = append(seqs, ack.Sequence)
		case err := <-f.Err():
			errs[i] = fmt.Errorf("publish turn %s to %s: %w", ts[i].MsgID(), q, err)
		case <-ctx.Done():
			errs[i] = opErr(ctx, fmt.Errorf("publish turn %s to %s: %w", ts[i].MsgID(), q, ctx.Err()))
		}
	}
	return seqs, errs
}

// turnMsg is the message of turn t on queue q.
func (b *Bus) turnMsg(q Queue, t Turn) (*nats.Msg, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("turn %s: %w", t.MsgID(), err)
	}
	msg := &nats.Msg{Subject: b.n.queueSubject(q, t.Tenant, t.RunID), Data: data}
	if t.Traceparent != "" {
		msg.Header = nats.Header{traceHeader: []string{t.Traceparent}}
	}
	return msg, nil
}

func (b *Bus) publishTurn(ctx context.Context, q Queue, t Turn) error {
	msg, err := b.turnMsg(q, t)
	if err != nil {
		return fmt.Errorf("publish turn to %s: %w", q, err)
	}
	if _, err := b.publish(ctx, msg, b.n.queueStream(q), t.MsgID()); err != nil {
		return fmt.Errorf("publish turn %s to %s: %w", t.MsgID(), q, err)
	}
	return nil
}

// QueueDepth is the number of messages in queue q, delivered or not: what a
// queue-depth autoscaler looks at.
func (b *Bus) QueueDepth(ctx context.Context, q Queue) (uint64, error) {
	if err := q.valid(); err != nil {
		return 0, err
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	st, err := b.js.Stream(ctx, b.n.queueStream(q))
	if err != nil {
		return 0, fmt.Errorf("queue depth of %s: %w", q, err)
	}
	return st.CachedInfo().State.Msgs, nil
}

// TurnWaiting reports whether a turn message of the run is in a turn
// queue (AF_RUNQ, AF_WORK or AF_SPILL), delivered or not: a work-queue
// message stays in its stream until a worker or the scheduler acks it, so
// a run with a turn due and no message in any queue has lost its turn. The
// dispatcher's sweep asks this of runs due a turn that have not changed
// for a while.
func (b *Bus) TurnWaiting(ctx context.Context, tenant, runID string) (bool, error) {
	if err := validRun(tenant, runID); err != nil {
		return false, err
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	for _, q := range turnQueues {
		st, err := b.js.Stream(ctx, b.n.queueStream(q))
		if err != nil {
			return false, fmt.Errorf("turns of run %s in %s: %w", runID, q, err)
		}
		_, err = st.GetLastMsgForSubject(ctx, b.n.queueSubject(q, tenant, runID))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("turns of run %s in %s: %w", runID, q, err)
		}
	}
	return false, nil
}

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

// Delivery is one turn handed to one caller. The caller settles it exactly
// once: Ack after the turn is committed and its continuation published,
// NakWithDelay to retry it later, Term to drop it, or DeadLetter.
type Delivery struct {
	Turn  Turn
	Queue Queue
	// NumDelivered counts deliveries of this message, this one included.
	NumDelivered uint64
	// PriorAttempts counts the attempts of this turn that earlier
	// messages carrying it (handed back by HandBack) had used; HandedBack
	// how often it was handed back. Attempts is the sum that counts
	// toward MaxDeliver.
	PriorAttempts uint64
	HandedBack    uint64
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Enqueued is when the stream stored the message.
	Enqueued time.Time
	// Pending is how many messages were left undelivered on the
	// consumer when the server sent this one: a caller with room for
	// more can FetchReady them in one round trip rather than pull them
	// one by one.
	Pending uint64

	msg jetstream.Msg
	src *TurnSource
}

// Attempts counts the attempts of this turn, this one included, toward
// MaxDeliver: this message's deliveries and the PriorAttempts of those
// it was handed back from.
func (d *Delivery) Attempts() uint64 { return d.PriorAttempts + d.NumDelivered }

// LastAttempt reports whether this is the MaxDeliver-th attempt: if the
// turn fails now, dead-letter it instead of retrying.
func (d *Delivery) LastAttempt() bool {
	return d.Attempts() >= uint64(d.src.b.cfg.MaxDeliver)
}

// Exhausted reports whether the turn was attempted more than MaxDeliver
// times, e.g. because workers died on it: dead-letter it without running.
func (d *Delivery) Exhausted() bool {
	return d.Attempts() > uint64(d.src.b.cfg.MaxDeliver)
}

// MaxDeliver is the fleet's dead-letter threshold (Config.MaxDeliver).
func (d *Delivery) MaxDeliver() int { return d.src.b.cfg.MaxDeliver }

// InProgress tells the server the turn is still being worked on, resetting
// its AckWait clock.
func (d *Delivery) InProgress() error {
	if err := d.msg.InProgress(); err != nil {
		return fmt.Errorf("in progress %s: %w", d.Turn.MsgID(), err)
	}
	return nil
}

// AckAsync acks without waiting for the server's confirmation. A lost
// ack only means a redelivery, which every consumer of turns tolerates
// (message ids dedupe the forwards, turn fences the commits); the
// scheduler uses it to settle a batch without a round trip per turn.
func (d *Delivery) AckAsync() error {
	if err := d.msg.Ack(); err != nil {
		return fmt.Errorf("ack %s: %w", d.Turn.MsgID(), err)
	}
	return nil
}

// Ack settles the turn as done and waits for the server to confirm, so a
// nil error means the turn will not come back.
func (d *Delivery) Ack(ctx context.Context) error {
	ctx, cancel := d.src.b.opCtx(ctx)
	defer cancel()
	if err := d.msg.DoubleAck(ctx); err != nil {
		return opErr(ctx, fmt.Errorf("ack %s: %w", d.Turn.MsgID(), err))
	}
	return nil
}

// NakWithDelay hands the turn back for redelivery after delay (0 means at
// once). NumDelivered of the next delivery is one higher.
func (d *Delivery) NakWithDelay(delay time.Duration) error {
	var err error
	if delay <= 0 {
		err = d.msg.Nak()
	} else {
		err = d.msg.NakWithDelay(delay)
	}
	if err != nil {
		return fmt.Errorf("nak %s: %w", d.Turn.MsgID(), err)
	}
	return nil
}

// Headers of a turn handed back by HandBack.
const (
	// HeaderAttempts carries Delivery.PriorAttempts.
	HeaderAttempts = "Af-Attempts"
	// HeaderHandedBack carries Delivery.HandedBack.
	HeaderHandedBack = "Af-Handed-Back"
)

// HandBack gives the turn back for another attempt without counting this
// one toward MaxDeliver: for a worker that failed the turn for want of its
// own resources, not the run's. JetStream counts every delivery of a
// message, so the turn is published anew, on the same subject of the same
// stream, carrying the attempts that count, and this message is then
// acked. The copy's message id is handback/<stream>/<seq>: if the ack is
// lost and this message comes back, handing it back again stores one
// copy. Delay it by holding the message (KeepAlive) before calling.
func (d *Delivery) HandBack(ctx context.Context) error {
	b := d.src.b
	h := nats.Header{}
	if d.Turn.Traceparent != "" {
		h.Set(traceHeader, d.Turn.Traceparent)
	}
	h.Set(HeaderAttempts, strconv.FormatUint(d.Attempts()-1, 10))
	h.Set(HeaderHandedBack, strconv.FormatUint(d.HandedBack+1, 10))
	msg := &nats.Msg{Subject: d.msg.Subject(), Header: h, Data: d.msg.Data()}
	id := "handback/" + d.src.stream + "/" + strconv.FormatUint(d.StreamSeq, 10)
	if _, err := b.publish(ctx, msg, d.src.stream, id); err != nil {
		return fmt.Errorf("hand back %s: %w", d.Turn.MsgID(), err)
	}
	if err := d.Ack(ctx); err != nil {
		return fmt.Errorf("hand back %s: published again, but the ack failed (the copy is deduplicated if it is handed back again): %w", d.Turn.MsgID(), err)
	}
	return nil
}

// Term drops the turn for good, e.g. when its run no longer exists. The
// reason shows in the server's advisory.
func (d *Delivery) Term(reason string) error {
	if err := d.msg.TermWithReason(headerSafe(reason)); err != nil {
		return fmt.Errorf("term %s: %w", d.Turn.MsgID(), err)
	}
	return nil
}

// KeepAlive sends InProgress at least every AckWait/3 until stop is
// called, ctx ends, the delivery is settled, or the Bus closes; once stop
// returns, no more InProgress is sent for d. Wrap the model call and
// script execution of a turn in it.
//
// One goroutine of the Bus heartbeats every kept delivery (heartbeats.go):
// a worker holds a turn per slot, and a goroutine and a ticker per turn
// were a tenth of the memory of a turn waiting on its model.
func (d *Delivery) KeepAlive(ctx context.Context) (stop func()) {
	return d.src.b.beats.keep(d, ctx)
}
