package client

import (
	"context"
	"iter"

	"github.com/agentfleet/agentfleet"
)

// RunEvents iterates over a run's events after afterSeq (0: all), in seq
// order, ending after its terminal event (done). A dropped connection
// is resumed with Last-Event-ID, so every event comes exactly once. The
// iteration ends early when the loop breaks; it yields one error, and
// ends, when ctx ends or the API refuses the stream (an *Error, e.g. 404
// for a run the key cannot see).
//
//	for ev, err := range c.RunEvents(ctx, run.ID, 0) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(ev.Seq, ev.Type, ev.Summary)
//	}
func (c *Client) RunEvents(ctx context.Context, runID string, afterSeq int64) iter.Seq2[agentfleet.Event, error] {
	return func(yield func(agentfleet.Event, error) bool) {
		err := c.Events(ctx, runID, afterSeq, func(ev agentfleet.Event) error {
			if !yield(ev, nil) {
				return ErrStopEvents
			}
			return nil
		})
		if err != nil {
			yield(agentfleet.Event{}, err)
		}
	}
}

// AllEvents iterates over the events of every run of the caller's tenant
// (GET /v1/events), in the order the fleet stored them, for as long as
// the loop goes on: the stream has no end of its own. A dropped
// connection is resumed after the last position seen, so no event is
// lost. Each TenantEvent carries its position, which
// TenantEventsParams.After resumes from in a later process. An event
// the fleet published again after a crash may come twice, with the same
// run id and seq. It yields one error, and ends, when ctx ends or the API
// refuses the stream.
func (c *Client) AllEvents(ctx context.Context, p TenantEventsParams) iter.Seq2[TenantEvent, error] {
	return func(yield func(TenantEvent, error) bool) {
		err := c.TenantEvents(ctx, p, func(ev TenantEvent) error {
			if !yield(ev, nil) {
				return ErrStopEvents
			}
			return nil
		})
		if err != nil {
			yield(TenantEvent{}, err)
		}
	}
}
