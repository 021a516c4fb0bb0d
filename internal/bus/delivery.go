package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
