package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a dead letter. The payload is the original message's, byte
// for byte.
const (
	HeaderDLQReason     = "Af-Dlq-Reason"
	HeaderDLQSubject    = "Af-Dlq-Subject"
	HeaderDLQStream     = "Af-Dlq-Stream"
	HeaderDLQStreamSeq  = "Af-Dlq-Stream-Seq"
	HeaderDLQDeliveries = "Af-Dlq-Deliveries"
)

// maxReasonLen keeps a reason (often an error message) from bloating
// every header block it lands in.
const maxReasonLen = 1024

// DeadLetter copies the turn to AF_DLQ with the reason, its original
// subject, stream position and delivery count as headers, then terminates
// the original so it is never redelivered. The copy's message id is
// dlq/<stream>/<seq>: if terminating fails and the turn comes back, dead-
// lettering it again stores one copy.
func (d *Delivery) DeadLetter(ctx context.Context, reason string) error {
	b := d.src.b
	reason = headerSafe(reason)
	tenant, runID := "_", "_"
	if toks, ok := b.n.tokensAfter(d.msg.Subject(), d.Queue.String(), 2); ok {
		tenant, runID = toks[0], toks[1]
	}
	h := nats.Header{}
	h.Set(HeaderDLQReason, reason)
	h.Set(HeaderDLQSubject, d.msg.Subject())
	h.Set(HeaderDLQStream, d.src.stream)
	h.Set(HeaderDLQStreamSeq, strconv.FormatUint(d.StreamSeq, 10))
	h.Set(HeaderDLQDeliveries, strconv.FormatUint(d.Attempts(), 10))
	msg := &nats.Msg{Subject: b.n.dlqSubject(tenant, runID), Header: h, Data: d.msg.Data()}
	id := "dlq/" + d.src.stream + "/" + strconv.FormatUint(d.StreamSeq, 10)
	if _, err := b.publish(ctx, msg, b.n.stream(streamDLQ), id); err != nil {
		return fmt.Errorf("dead-letter %s: %w", d.msg.Subject(), err)
	}
	if err := d.msg.TermWithReason("dead-lettered: " + reason); err != nil {
		return fmt.Errorf("dead-letter %s: copied, but term failed (it will be dead-lettered again on redelivery): %w", d.msg.Subject(), err)
	}
	return nil
}

// DeadLetterRecord is one message of AF_DLQ.
type DeadLetterRecord struct {
	// Seq is the record's sequence in AF_DLQ, for paging.
	Seq    uint64
	Tenant string
	RunID  string
	Reason string
	// Subject, Stream and StreamSeq locate the original message.
	Subject    string
	Stream     string
	StreamSeq  uint64
	Deliveries uint64
	Stored     time.Time
	// Data is the original payload (a Turn envelope, or whatever could
	// not be decoded as one).
	Data []byte
}

// DeadLetters reads up to limit dead letters with a sequence above
// afterSeq, oldest first: the admin view of what the fleet gave up on.
// Pass the last record's Seq to page on.
func (b *Bus) DeadLetters(ctx context.Context, afterSeq uint64, limit int) ([]DeadLetterRecord, error) {
	if limit < 1 {
		return nil, fmt.Errorf("dead letters: limit %d must be at least 1", limit)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	stream := b.n.stream(streamDLQ)
	cons, err := b.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   afterSeq + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	defer deleteOrdered(b, stream, cons)
	// Fetch only as many as exist, so an empty tail does not wait for
	// the fetch to expire.
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	n := min(uint64(limit), info.NumPending)
	if n == 0 {
		return nil, nil
	}
	batch, err := cons.Fetch(int(n), jetstream.FetchContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	var out []DeadLetterRecord
	for m := range batch.Messages() {
		out = append(out, b.deadLetterRecord(m))
	}
	if err := batch.Error(); err != nil && len(out) == 0 && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return out, nil
}

func (b *Bus) deadLetterRecord(m jetstream.Msg) DeadLetterRecord {
	h := m.Headers()
	r := DeadLetterRecord{
		Reason:  h.Get(HeaderDLQReason),
		Subject: h.Get(HeaderDLQSubject),
		Stream:  h.Get(HeaderDLQStream),
		Data:    m.Data(),
	}
	r.StreamSeq, _ = strconv.ParseUint(h.Get(HeaderDLQStreamSeq), 10, 64)
	r.Deliveries, _ = strconv.ParseUint(h.Get(HeaderDLQDeliveries), 10, 64)
	if md, err := m.Metadata(); err == nil {
		r.Seq, r.Stored = md.Sequence.Stream, md.Timestamp
	}
	if toks, ok := b.n.tokensAfter(m.Subject(), "dlq", 2); ok {
		r.Tenant, r.RunID = toks[0], toks[1]
	}
	return r
}

// deleteOrdered removes the server side of a short-lived ordered consumer
// now rather than leaving it to its inactivity threshold.
func deleteOrdered(b *Bus, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil || !b.nc.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
	defer cancel()
	_ = b.js.DeleteConsumer(ctx, stream, info.Name)
}

// headerSafe makes s fit in one header value: no line breaks, bounded.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		s = strings.ToValidUTF8(s[:maxReasonLen], "")
	}
	return s
}
