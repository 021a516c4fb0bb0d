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

	"github.com/agentfleet/agentfleet"
)

// eventMsgID is "<run>/ev/<seq>": an event published again (a worker
// re-publishing what a commit owed after a crash) is stored once.
func eventMsgID(ev agentfleet.Event) string {
	return ev.RunID + "/ev/" + strconv.FormatInt(ev.Seq, 10)
}

func validEvent(ev agentfleet.Event) error {
	if err := validRun(ev.Tenant, ev.RunID); err != nil {
		return err
	}
	if err := validToken(string(ev.Type)); err != nil {
		return fmt.Errorf("event type: %w", err)
	}
	if ev.Seq < 1 {
		return fmt.Errorf("event seq %d: seq counts from 1", ev.Seq)
	}
	return nil
}

// PublishEvents publishes evs to AF_EVENTS on <p>.events.<tenant>.<run>.<type>
// without waiting between them, then waits for every ack. A nil error
// means all are stored; on error some may be, and publishing the same
// events again is safe. An event with V 0 is sent with the current schema
// version.
func (b *Bus) PublishEvents(ctx context.Context, evs []agentfleet.Event) error {
	sent, err := b.SendEvents(evs)
	if err != nil {
		return err
	}
	return sent.Wait(ctx)
}

// SendEvents is the first half of PublishEvents: it sends evs and returns
// without waiting for their acks, so the caller can go on with other work
// while they come back. Wait then says whether the events are stored. The
// stream stores a connection's messages in the order sent, so events sent
// after these land after them, unless these fail: a caller that must keep
// a run's events in seq order waits before it sends the run's next ones.
func (b *Bus) SendEvents(evs []agentfleet.Event) (*EventsSent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		if err := validEvent(ev); err != nil {
			return nil, fmt.Errorf("publish event %d of %d: %w", i+1, len(evs), err)
		}
		if ev.V == 0 {
			ev.V = agentfleet.EventVersion
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("publish event %s: %w", eventMsgID(ev), err)
		}
		msgs[i] = &nats.Msg{Subject: b.n.eventSubject(ev.Tenant, ev.RunID, string(ev.Type)), Data: data}
	}
	s := &EventsSent{b: b, msgs: msgs, evs: evs}
	s.futures, s.sendErr = b.sendEvents(msgs, evs)
	return s, nil
}

// EventsSent is a batch of events SendEvents sent, whose acks may still
// be on their way. A nil *EventsSent is an empty batch.
type EventsSent struct {
	b       *Bus
	msgs    []*nats.Msg
	evs     []agentfleet.Event
	futures []jetstream.PubAckFuture
	sendErr error

	waited bool
	err    error
}

// Wait waits for the batch's acks, within ctx and the bus's request
// timeout when ctx has no deadline, and reports what PublishEvents would
// have. When the stream vanished (a server restarted empty), it recreates
// it and sends the batch again; ids make the repeats harmless. Waiting
// again returns the first outcome, even when that was the end of ctx (an
// ack taken off its future is not there to take again). Wait is not safe
// for concurrent use.
func (s *EventsSent) Wait(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if s.waited {
		return s.err
	}
	b := s.b
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	err := opErr(ctx, awaitAcks(ctx, s.futures, s.sendErr))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		stream := b.n.stream(streamEvents)
		if eerr := b.ensureStream(ctx, stream); eerr != nil {
			err = fmt.Errorf("%w (and %w)", err, eerr)
		} else {
			futures, sendErr := b.sendEvents(s.msgs, s.evs)
			err = opErr(ctx, awaitAcks(ctx, futures, sendErr))
		}
	}
	if err != nil {
		err = fmt.Errorf("publish %d events of run %s: %w", len(s.evs), s.evs[0].RunID, err)
	}
	s.waited, s.err = true, err
	// The batch is settled: let go of it while the caller keeps s (a
	// worker keeps it for the rest of the turn it runs in place).
	s.msgs, s.evs, s.futures, s.sendErr = nil, nil, nil, nil
	return err
}

// sendEvents sends msgs, the encoded evs, until one fails to send (none
// while disconnected), and returns the futures of those sent.
func (b *Bus) sendEvents(msgs []*nats.Msg, evs []agentfleet.Event) ([]jetstream.PubAckFuture, error) {
	if err := b.checkConn(); err != nil {
		return nil, err
	}
	stream := b.n.stream(streamEvents)
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i, m := range msgs {
		// A fresh message each time: the client keeps a reference to the
		// one it sent until the ack comes.
		msg := &nats.Msg{Subject: m.Subject, Data: m.Data}
		f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(eventMsgID(evs[i])), jetstream.WithExpectStream(stream))
		if err != nil {
			return futures, fmt.Errorf("send event %s: %w", eventMsgID(evs[i]), err)
		}
		futures = append(futures, f)
	}
	return futures, nil
}

// awaitAcks waits for the acks of futures even after a send error, so no
// ack is left racing with the caller's retry.
func awaitAcks(ctx context.Context, futures []jetstream.PubAckFuture, sendErr error) error {
	var ackErr error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if ackErr == nil {
				ackErr = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(sendErr, ackErr)
}

// EventStream delivers one run's events in seq order: the stored history
// first, then live ones as they are published.
type EventStream struct {
	r    *eventReader
	last int64
}

// RunEvents opens an ordered consumer on <p>.events.<tenant>.<run>.> from
// the start of the stream and skips events with seq <= afterSeq, so a
// client resuming with Last-Event-ID n passes n. The ordered consumer is
// ephemeral and in memory on the server; it survives reconnects by
// re-creating itself after the last event delivered. Close it when done.
func (b *Bus) RunEvents(ctx context.Context, tenant, runID string, afterSeq int64) (*EventStream, error) {
	if err := validRun(tenant, runID); err != nil {
		return nil, fmt.Errorf("run events: %w", err)
	}
	r, err := b.openEvents(ctx, "run events of "+runID, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.n.runEvents(tenant, runID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	return &EventStream{r: r, last: max(afterSeq, 0)}, nil
}

// Next blocks until the next event of the run, or ctx ends. It does not
// add a default timeout: waiting for live events is its job. Events come
// with strictly increasing seq; a duplicate or an older seq is skipped.
// Next is not safe for concurrent use; one reader per EventStream. While
// the stream re-creates its consumer after a reconnect, Next waits for
// that (with the client's own backoff) even if ctx ends; Close stops it.
func (s *EventStream) Next(ctx context.Context) (agentfleet.Event, error) {
	for {
		ev, _, err := s.r.next(ctx, "next run event")
		if err != nil {
			return agentfleet.Event{}, err
		}
		if ev.Seq <= s.last {
			continue
		}
		s.last = ev.Seq
		return ev, nil
	}
}

// Close stops the stream and deletes its consumer. Safe to call twice.
func (s *EventStream) Close() { s.r.close() }

// TenantEventStream delivers the events of one tenant, or of every
// tenant, in the order the events stream stored them, each with its
// position there (the stream sequence), which a reader resumes after.
type TenantEventStream struct {
	r     *eventReader
	start uint64
}

// TenantEvent is an event and its position in the events stream.
type TenantEvent struct {
	Pos   uint64
	Event agentfleet.Event
}

// TenantEvents opens an ordered consumer on <p>.events.<tenant>.> (every
// tenant's when tenant is empty) that delivers the events stored after
// position after or, when fromNow, after the last one stored now. Events
// aged out of the stream are skipped. A position past the stream's end
// (the stream was recreated and counts again from 1) starts from its
// beginning, so no event is lost; the reader may see events it had,
// which their run id and seq identify. Close it when done.
func (b *Bus) TenantEvents(ctx context.Context, tenant string, after uint64, fromNow bool) (*TenantEventStream, error) {
	subject := b.n.eventsAll()
	if tenant != "" {
		if err := validToken(tenant); err != nil {
			return nil, fmt.Errorf("tenant events: tenant: %w", err)
		}
		subject = b.n.tenantEvents(tenant)
	}
	if err := b.checkConn(); err != nil {
		return nil, fmt.Errorf("tenant events: %w", err)
	}
	octx, cancel := b.opCtx(ctx)
	st, err := b.js.Stream(octx, b.n.stream(streamEvents))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("tenant events: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	if fromNow {
		after = last
	}
	if after > last {
		after = 0
	}
	r, err := b.openEvents(ctx, "tenant events", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
	})
	if err != nil {
		return nil, err
	}
	return &TenantEventStream{r: r, start: after}, nil
}

// Start is the position the stream delivers events after: the one asked
// for, or what TenantEvents made of it.
func (s *TenantEventStream) Start() uint64 { return s.start }

// Next blocks until the next event, or ctx ends; see EventStream.Next.
func (s *TenantEventStream) Next(ctx context.Context) (TenantEvent, error) {
	ev, pos, err := s.r.next(ctx, "next tenant event")
	return TenantEvent{Pos: pos, Event: ev}, err
}

// Close stops the stream and deletes its consumer. Safe to call twice.
func (s *TenantEventStream) Close() { s.r.close() }

// eventReader is an ordered consumer on the events stream with its
// message iterator, closed by its owner or by the bus's Close.
type eventReader struct {
	b       *Bus
	stream  string
	cons    jetstream.Consumer
	it      jetstream.MessagesContext
	untrack func()

	closeOnce sync.Once
}

// openEvents opens an ordered consumer on the events stream. It is
// ephemeral and in memory on the server, which reaps it a minute after
// its client vanished without closing it.
func (b *Bus) openEvents(ctx context.Context, what string, cfg jetstream.OrderedConsumerConfig) (*eventReader, error) {
	if err := b.checkConn(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	stream := b.n.stream(streamEvents)
	cfg.InactiveThreshold = time.Minute
	cons, err := b.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	it, err := cons.Messages()
	if err != nil {
		deleteOrdered(b, stream, cons)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r := &eventReader{b: b, stream: stream, cons: cons, it: it}
	untrack, err := b.track(r.stop)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.untrack = untrack
	return r, nil
}

// next returns the next decodable event and its stream position.
func (r *eventReader) next(ctx context.Context, what string) (agentfleet.Event, uint64, error) {
	for {
		m, err := r.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return agentfleet.Event{}, 0, ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return agentfleet.Event{}, 0, ErrClosed
			}
			return agentfleet.Event{}, 0, fmt.Errorf("%s: %w", what, err)
		}
		var ev agentfleet.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			r.b.log.Warn("skip undecodable event", "subject", m.Subject(), "err", err)
			continue
		}
		var pos uint64
		if md, err := m.Metadata(); err == nil {
			pos = md.Sequence.Stream
		}
		return ev, pos, nil
	}
}

func (r *eventReader) close() {
	if r.untrack != nil {
		r.untrack()
	}
	r.stop()
}

func (r *eventReader) stop() {
	r.closeOnce.Do(func() {
		r.it.Stop()
		deleteOrdered(r.b, r.stream, r.cons)
	})
}

// EventFilter selects live events; an empty field matches anything.
type EventFilter struct {
	Tenant string
	RunID  string
	Type   agentfleet.EventType
}

// SubscribeEvents calls fn for every event published from now on that
// matches f, on a plain core subscription: no history, no acks, nothing
// kept on the server, and a slow fn drops events rather than stalling
// publishers. That suits a console or a tail; a client that must not miss
// any uses RunEvents. fn is called from one goroutine at a time; after
// unsubscribe returns, fn is not called again, though a call already
// running may still be finishing.
func (b *Bus) SubscribeEvents(ctx context.Context, f EventFilter, fn func(agentfleet.Event)) (unsubscribe func(), err error) {
	for name, tok := range map[string]string{"tenant": f.Tenant, "run id": f.RunID, "event type": string(f.Type)} {
		if tok == "" {
			continue
		}
		if err := validToken(tok); err != nil {
			return nil, fmt.Errorf("subscribe events: %s: %w", name, err)
		}
	}
	subject := b.n.eventSubject(f.Tenant, f.RunID, string(f.Type))
	return b.subscribe(ctx, subject, func(m *nats.Msg) {
		var ev agentfleet.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			b.log.Warn("skip undecodable event", "subject", m.Subject, "err", err)
			return
		}
		fn(ev)
	})
}

// subscribe makes a core subscription that Close also ends, and waits
// until the server has registered it so that a publish made after it
// returns is seen.
func (b *Bus) subscribe(ctx context.Context, subject string, handler nats.MsgHandler) (func(), error) {
	if err := b.checkConn(); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	sub, err := b.nc.Subscribe(subject, handler)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = sub.Unsubscribe() }) }
	untrack, err := b.track(stop)
	if err != nil {
		stop()
		return nil, err
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	if err := b.nc.FlushWithContext(ctx); err != nil {
		untrack()
		stop()
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	return func() {
		untrack()
		stop()
	}, nil
}
