package bus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
