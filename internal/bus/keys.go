package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
)

// API key revocations travel between dispatchers on <p>.ctl.keys.revoked
// (core NATS; the payload is the key's id), so that a key revoked on one
// dispatcher is dropped from every dispatcher's lookup cache at once. Like
// control messages they are best effort: the store is the truth, and a
// dispatcher that misses one (disconnected at that moment) keeps the key
// only until its cache entry expires. The subject has two tokens after
// "ctl", so no run control subscription (three) sees it.

func (n names) keysRevoked() string { return n.prefix + ".ctl.keys.revoked" }

// PublishKeyRevoked tells every subscriber that the API key keyID was
// revoked, and flushes it to the server; a nil error says it reached the
// server, not that anyone acted on it.
func (b *Bus) PublishKeyRevoked(ctx context.Context, keyID string) error {
	if err := validToken(keyID); err != nil {
		return fmt.Errorf("publish key revocation: key id: %w", err)
	}
	if err := b.checkConn(); err != nil {
		return fmt.Errorf("publish revocation of key %s: %w", keyID, err)
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	if err := b.nc.Publish(b.n.keysRevoked(), []byte(keyID)); err != nil {
		return fmt.Errorf("publish revocation of key %s: %w", keyID, err)
	}
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return opErr(ctx, fmt.Errorf("publish revocation of key %s: %w", keyID, err))
	}
	return nil
}

// SubscribeKeyRevoked calls fn with the id of every key revoked from now
// on (its own publications included). fn is called from one goroutine at
// a time and should not block. The subscription is registered at the
// server when it returns, and ends with unsubscribe or Close.
func (b *Bus) SubscribeKeyRevoked(fn func(keyID string)) (unsubscribe func(), err error) {
	return b.subscribe(context.Background(), b.n.keysRevoked(), func(m *nats.Msg) {
		if id := string(m.Data); validToken(id) == nil {
			fn(id)
		}
	})
}
