package bus

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// ErrInvalidToken is returned (wrapped) when a tenant id, run id, event type
// or control verb cannot be used as a subject token.
var ErrInvalidToken = errors.New("invalid subject token")

// validToken reports whether s can be one token of a NATS subject: a
// tenant or run id that contained '.', '*' or '>' would change which
// subjects a filter matches, so one tenant could read another's events.
func validToken(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	for _, r := range s {
		switch {
		case r == '.' || r == '*' || r == '>':
			return fmt.Errorf("%w: %q contains %q", ErrInvalidToken, s, r)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("%w: %q contains whitespace or a control character", ErrInvalidToken, s)
		}
	}
	return nil
}

// validName reports whether s can be (part of) a stream, consumer or KV
// bucket name: the server also forbids path separators there, and KV bucket
// names are restricted to letters, digits, '-' and '_'.
func validName(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("%q: use only letters, digits, '-' and '_'", s)
		}
	}
	return nil
}

func validRun(tenant, runID string) error {
	if err := validToken(tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if err := validToken(runID); err != nil {
		return fmt.Errorf("run id: %w", err)
	}
	return nil
}

// Queue names one of the turn queues.
type Queue int

const (
	// QueueRunQ is AF_RUNQ: every turn to execute is enqueued here.
	QueueRunQ Queue = iota + 1
	// QueueWork is AF_WORK: the fair scheduler forwards turns here from
	// AF_RUNQ, and workers pull from it.
	QueueWork
	// QueueSpill is AF_SPILL: the fair scheduler moves here the turns of
	// a tenant holding more than its share of what the scheduler can
	// hold, and takes them back, a tenant at a time, as it has room.
	QueueSpill
)

// turnQueues are the queues a turn message may wait in.
var turnQueues = []Queue{QueueRunQ, QueueWork, QueueSpill}

func (q Queue) String() string {
	switch q {
	case QueueRunQ:
		return "runq"
	case QueueWork:
		return "work"
	case QueueSpill:
		return "spill"
	}
	return fmt.Sprintf("Queue(%d)", int(q))
}

func (q Queue) valid() error {
	if q != QueueRunQ && q != QueueWork && q != QueueSpill {
		return fmt.Errorf("unknown queue %d: use QueueRunQ, QueueWork or QueueSpill", int(q))
	}
	return nil
}

// names derives every stream name and subject from the two prefixes, so
// nothing else in the package formats one by hand.
type names struct {
	prefix       string
	streamPrefix string
}

const (
	streamRunQ   = "RUNQ"
	streamWork   = "WORK"
	streamSpill  = "SPILL"
	streamEvents = "EVENTS"
	streamDLQ    = "DLQ"
)

func (n names) stream(suffix string) string { return n.streamPrefix + suffix }

func (n names) queueStream(q Queue) string {
	switch q {
	case QueueWork:
		return n.stream(streamWork)
	case QueueSpill:
		return n.stream(streamSpill)
	}
	return n.stream(streamRunQ)
}

// queueSubject is <p>.<queue>.<tenant>.<run> (runq, work, spill); an
// empty tenant or run becomes the matching wildcard.
func (n names) queueSubject(q Queue, tenant, runID string) string {
	return n.prefix + "." + q.String() + "." + orStar(tenant) + "." + orStar(runID)
}

func (n names) queueAll(q Queue) string { return n.prefix + "." + q.String() + ".>" }

func (n names) eventSubject(tenant, runID, typ string) string {
	return n.prefix + ".events." + orStar(tenant) + "." + orStar(runID) + "." + orStar(typ)
}

func (n names) runEvents(tenant, runID string) string {
	return n.prefix + ".events." + tenant + "." + runID + ".>"
}

func (n names) tenantEvents(tenant string) string { return n.prefix + ".events." + tenant + ".>" }

func (n names) eventsAll() string { return n.prefix + ".events.>" }

func (n names) batchSubject(tenant, batch, typ string) string {
	return n.prefix + ".batches." + orStar(tenant) + "." + orStar(batch) + "." + orStar(typ)
}

func (n names) batchesAll() string { return n.prefix + ".batches.>" }

func (n names) dlqSubject(tenant, runID string) string {
	return n.prefix + ".dlq." + tenant + "." + runID
}

func (n names) dlqAll() string { return n.prefix + ".dlq.>" }

func (n names) ctlSubject(tenant, runID, verb string) string {
	return n.prefix + ".ctl." + orStar(tenant) + "." + orStar(runID) + "." + orStar(verb)
}

func (n names) leaseBucket(name string) string { return n.streamPrefix + "LEASE_" + name }

// tokensAfter splits subject into the tokens that follow "<p>.<kind>." and
// reports whether it had that shape with exactly want tokens.
func (n names) tokensAfter(subject, kind string, want int) ([]string, bool) {
	head := n.prefix + "." + kind + "."
	rest, ok := strings.CutPrefix(subject, head)
	if !ok {
		return nil, false
	}
	toks := strings.Split(rest, ".")
	if len(toks) != want {
		return nil, false
	}
	return toks, true
}

func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// streamSubject is <p>.stream.<tenant>.<run>, where a run's response
// chunks go (core NATS, outside every stream); empty parts become
// wildcards.
func (n names) streamSubject(tenant, runID string) string {
	return n.prefix + ".stream." + orStar(tenant) + "." + orStar(runID)
}
