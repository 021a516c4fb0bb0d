// Streamed replies: a turn's model call delivered as it is produced, as
// response_chunk events redacted on the way (no chunk carries part of a
// secret), and a stream that breaks midway made again as a plain call.

package loop

import (
	"context"
	"fmt"

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

// chunks turns a reply's deltas into response_chunk events.
type chunks struct {
	t     *turn
	red   *redact.Stream
	index int
}

func (c *chunks) add(delta string) { c.send(c.red.Write(delta)) }

func (c *chunks) flush() { c.send(c.red.Flush()) }

// restart sends a whole reply as the turn's chunk 1.
func (c *chunks) restart(content string) {
	c.index = 0
	c.red = redact.NewStream(nil)
	c.send(c.t.clean(content))
}

func (c *chunks) send(text string) {
	if text == "" {
		return
	}
	c.index++
	t := c.t
	t.in.OnChunk(agentfleet.Event{
		V: agentfleet.EventVersion, RunID: t.run.ID, Tenant: t.run.Tenant, SessionID: t.run.SessionID,
		Turn: t.n, Type: agentfleet.EventResponseChunk, TS: t.e.cfg.Now().UTC(), Index: c.index, Text: text,
	})
}
