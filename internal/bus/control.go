package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
)

// VerbCancel asks whoever runs the run to stop it at once.
const VerbCancel = "cancel"

// PublishControl sends verb about one run on <p>.ctl.<tenant>.<run>.<verb>
// (no payload) and flushes it to the server; a nil error says it reached
// the server, not that anyone acted on it. Control is best effort: nothing
// stores it, and a worker that is not listening misses it. That is fine
// because the durable truth (e.g. the run's cancel flag) is in the store
// and is read at the next turn boundary anyway; control only makes it
// prompt.
func (b *Bus) PublishControl(ctx context.Context, tenant, runID, verb string) error {
	if err := validRun(tenant, runID); err != nil {
		return fmt.Errorf("publish control: %w", err)
	}
	if err := validToken(verb); err != nil {
		return fmt.Errorf("publish control: verb: %w", err)
	}
	if err := b.checkConn(); err != nil {
		return fmt.Errorf("publish control %s to %s: %w", verb, runID, err)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	if err := b.nc.Publish(b.n.ctlSubject(tenant, runID, verb), nil); err != nil {
		return fmt.Errorf("publish control %s to %s: %w", verb, runID, err)
	}
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return opErr(ctx, fmt.Errorf("publish control %s to %s: %w", verb, runID, err))
	}
	return nil
}

// SubscribeControl calls fn for every control message of every run; a
// worker filters for the runs it holds. fn is called from one goroutine at
// a time and should not block. The subscription is registered at the
// server when SubscribeControl returns, and ends with unsubscribe or Close.
func (b *Bus) SubscribeControl(fn func(tenant, runID, verb string)) (unsubscribe func(), err error) {
	return b.subscribe(context.Background(), b.n.ctlSubject("", "", ""), func(m *nats.Msg) {
		toks, ok := b.n.tokensAfter(m.Subject, "ctl", 3)
		if !ok {
			return
		}
		fn(toks[0], toks[1], toks[2])
	})
}
