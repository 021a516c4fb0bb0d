// Streamed replies: a turn's model call delivered as it is produced, as
// response_chunk events redacted on the way (no chunk carries part of a
// secret), and a stream that breaks midway made again as a plain call.

package loop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/redact"
)

// modelCall makes the turn's model call: streamed, when the turn has an
// OnChunk and the model streams, else plain.
//
// The chunks are the reply as the turn records it (its model step's
// content, secrets redacted): joined, they equal it. Index counts them
// from 1 in a turn. When the stream breaks after some deltas arrived, the
// call is made again as a plain call (the SDK client retries a stream
// only until its first delta, since the consumer has seen text), and its
// whole reply goes out as one chunk with index 1 again: a chunk of index
// 1 after others of the same turn starts the reply over. A warning event
// records the break.
//
// Billing: the turn is charged once, with the reply it records (the plain
// call's usage). The broken attempt's tokens are not charged: it reports
// no usage (providers send it with the last chunk), an estimate would
// charge for text no one uses, and the fleet, not the tenant, took the
// risk of streaming.
func (t *turn) modelCall(ctx context.Context, req agentfleet.ModelRequest, res *agentfleet.Reservation) (agentfleet.ModelResponse, error) {
	e := t.e
	s, ok := e.cfg.Model.(Streamer)
	if !ok || t.in.OnChunk == nil {
		return e.call(ctx, t.run, req, res)
	}
	ch := &chunks{t: t, red: redact.NewStream(t.redact)}
	defer ch.stop()
	deltas, bytes := 0, 0
	resp, err := s.Stream(ctx, req, func(c agentfleet.ModelChunk) error {
		if c.Done || c.Delta == "" {
			return nil
		}
		deltas++
		bytes += len(c.Delta)
		ch.add(c.Delta)
		return nil
	})
	if err == nil {
		ch.flush()
		return resp, nil
	}
	if deltas == 0 || ctx.Err() != nil {
		return e.released(ctx, res, func() (agentfleet.ModelResponse, error) { return resp, err })
	}
	t.emit(agentfleet.Event{Type: agentfleet.EventWarning, Content: fmt.Sprintf(
		"the model's stream broke after %d bytes (%v); the reply was asked for again as a plain call, and only that call is charged", bytes, err)})
	resp, err = e.call(ctx, t.run, req, res)
	if err == nil {
		ch.restart(resp.Content)
	}
	return resp, err
}

// chunkCoalesce is the least time between two of a turn's chunks: the
// deltas that arrive sooner after a chunk went out wait, at most this
// long, and go out together. A provider streaming tokens tens of
// milliseconds apart sees each go out at once; a reply that arrives in a
// burst (a fast provider, a cached reply) is a few events, not one per
// delta, which is what streaming costs the fleet per turn.
const chunkCoalesce = 2 * time.Millisecond

// chunks turns a reply's deltas into response_chunk events. add and flush
// run on the stream's goroutine; the timer that sends deltas held back by
// chunkCoalesce runs on its own, hence mu.
type chunks struct {
	t   *turn
	red *redact.Stream

	mu      sync.Mutex
	index   int
	pending strings.Builder
	last    time.Time   // when the last chunk went out
	timer   *time.Timer // sends pending, when set
	stopped bool
}

func (c *chunks) add(delta string) {
	text := c.red.Write(delta)
	if text == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.WriteString(text)
	wait := chunkCoalesce - time.Since(c.last)
	switch {
	case wait <= 0:
		c.sendLocked()
	case c.timer == nil:
		c.timer = time.AfterFunc(wait, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.timer = nil
			if !c.stopped {
				c.sendLocked()
			}
		})
	}
}

// flush sends what is held back: the end of the reply.
func (c *chunks) flush() {
	text := c.red.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.WriteString(text)
	c.stopTimerLocked()
	c.sendLocked()
}

// restart sends a whole reply as the turn's chunk 1, dropping what was
// held back of the broken stream.
func (c *chunks) restart(content string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopTimerLocked()
	c.index = 0
	c.red = redact.NewStream(nil)
	c.pending.Reset()
	c.pending.WriteString(c.t.clean(content))
	c.sendLocked()
}

// stop ends the chunks of the call: nothing is sent after it.
func (c *chunks) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopTimerLocked()
	c.stopped = true
}

func (c *chunks) stopTimerLocked() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

func (c *chunks) sendLocked() {
	if c.pending.Len() == 0 {
		return
	}
	text := c.pending.String()
	c.pending.Reset()
	c.index++
	c.last = time.Now()
	t := c.t
	t.in.OnChunk(agentfleet.Event{
		V: agentfleet.EventVersion, RunID: t.run.ID, Tenant: t.run.Tenant, SessionID: t.run.SessionID,
		Turn: t.n, Type: agentfleet.EventResponseChunk, TS: t.e.cfg.Now().UTC(), Index: c.index, Text: text,
	})
}
