package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// heartbeats sends InProgress for every kept delivery from one goroutine,
// started with the first KeepAlive and owned by the Bus (it ends at Close).
type heartbeats struct {
	b       *Bus
	mu      sync.Mutex
	kept    map[*Delivery]context.Context
	started bool
}

// keep adds d until stop is called or ctx ends.
func (h *heartbeats) keep(d *Delivery, ctx context.Context) (stop func()) {
	b := d.src.b
	h.mu.Lock()
	if h.kept == nil {
		h.b, h.kept = b, map[*Delivery]context.Context{}
	}
	h.kept[d] = ctx
	start := !h.started
	h.started = true
	h.mu.Unlock()
	if start && !b.goOwned(h.run) {
		h.mu.Lock()
		h.started = false
		h.mu.Unlock()
	}
	return func() {
		h.mu.Lock()
		delete(h.kept, d)
		h.mu.Unlock()
	}
}

// run beats every AckWait/3, so each kept delivery hears from its worker
// at least that often, until the Bus closes.
func (h *heartbeats) run() {
	t := time.NewTicker(h.b.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-h.b.ctx.Done():
			return
		case <-t.C:
		}
		h.beat()
	}
}

// beat sends one InProgress per kept delivery. It holds the lock while it
// sends (a publish only fills the connection's buffer), so a delivery
// whose stop has returned is never beaten again.
func (h *heartbeats) beat() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for d, ctx := range h.kept {
		if ctx.Err() != nil {
			delete(h.kept, d)
			continue
		}
		if err := d.msg.InProgress(); errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			delete(h.kept, d)
		} else if err != nil {
			// Disconnected, most likely: try again next tick. If the
			// outage outlasts AckWait the turn is redelivered, which
			// the commit fence makes harmless.
			h.b.log.Debug("keepalive", "turn", d.Turn.MsgID(), "err", err)
		}
	}
}
