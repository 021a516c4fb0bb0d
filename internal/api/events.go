package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// sseChunkBuffer is how many response chunks wait for a slow event
// stream before more are dropped.
const sseChunkBuffer = 1024

// handleRunEvents streams a run's events as Server-Sent Events: "id:" is
// the event's seq (dense from 1), "event:" its type, "data:" the event
// JSON. It replays history from the store, then follows live events from
// NATS, and ends after the terminal event. A client resumes with
// Last-Event-ID (or ?after=N) and gets exactly the events after it.
//
// The store is the truth and NATS the fast path: events arrive from NATS
// as they are published; a gap in seq (a publish that has not happened
// yet, or history aged out of the stream) is filled from the store, and
// the store is also polled every few seconds so a lost publish cannot
// stall a stream.
//
// A running turn's response chunks (the streamed pieces of its model
// reply, from core NATS) are interleaved as they arrive, as
// "event: response_chunk" without an "id:" line: they are not stored, so
// a resumed stream replays only stored events, and the model_call event
// that follows them carries the whole reply.
func (s *Server) handleRunEvents(w http.ResponseWriter, r *http.Request, p principal) {
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	last, err := resumePoint(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if run.Status.Terminal() {
		// A run never changes after its end. A client resuming after its
		// last event (an EventSource reconnects after every stream, with
		// the id of done) gets 204, which tells an EventSource to stop.
		evs, err := s.cfg.Store.EventListByRun(r.Context(), store.EventListByRunParams{RunID: run.ID, AfterSeq: last, Limit: 1})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if len(evs) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	flusher, err := sseFlusher(w)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	// Subscribe before reading the store, so nothing published in
	// between is missed. Without NATS the stream follows the store alone.
	live, err := s.cfg.Bus.RunEvents(ctx, run.Tenant, run.ID, last)
	if err != nil {
		s.log.Warn("subscribe to live events; following the store", "run", run.ID, "err", err)
		live = nil
	} else {
		defer live.Close()
	}

	var chunks chan agentfleet.Event // nil (never ready) without them
	if !run.Status.Terminal() {
		chunks = make(chan agentfleet.Event, sseChunkBuffer)
		stop, err := s.cfg.Bus.SubscribeChunks(ctx, run.Tenant, run.ID, func(ev agentfleet.Event) {
			select {
			case chunks <- ev:
			default: // a client this far behind gets the reply in model_call
			}
		})
		if err != nil {
			s.log.Warn("subscribe to response chunks; streaming stored events only", "run", run.ID, "err", err)
			chunks = nil
		} else {
			defer stop()
		}
	}

	startSSE(w, flusher)
	sse := &sseWriter{w: w, f: flusher, last: last}
	done, err := s.catchUp(ctx, sse, run.ID)
	if err != nil || done {
		return
	}
	if run.Status.Terminal() {
		// It had ended before the history was read, so nothing more
		// will come (even if its history lacks a done event).
		return
	}

	type next struct {
		ev  agentfleet.Event
		err error
	}
	var events chan next // nil (never ready) without NATS
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	if live != nil {
		events = make(chan next)
		go func() {
			for {
				ev, err := live.Next(liveCtx)
				select {
				case events <- next{ev, err}:
				case <-liveCtx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	poll := time.NewTicker(sseStorePoll)
	defer poll.Stop()
	keepAlive := time.NewTicker(sseKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-events:
			if n.err != nil {
				// NATS failed us; the store still has the truth.
				s.log.Warn("live events ended; following the store", "run", run.ID, "err", n.err)
				events = nil
				continue
			}
			// Chunks received before this event go first: a turn's
			// chunks precede its model_call, and none is lost after done.
			if err := sse.drainChunks(chunks); err != nil {
				return
			}
			switch {
			case n.ev.Seq <= sse.last:
				continue
			case n.ev.Seq > sse.last+1:
				if done, err := s.catchUp(ctx, sse, run.ID); err != nil || done {
					return
				}
				if n.ev.Seq <= sse.last {
					continue
				}
			}
			if err := sse.send(n.ev); err != nil || n.ev.Terminal() {
				return
			}
		case ev := <-chunks:
			if err := sse.chunk(ev); err != nil {
				return
			}
		case <-poll.C:
			if err := sse.drainChunks(chunks); err != nil {
				return
			}
			if done, err := s.catchUp(ctx, sse, run.ID); err != nil || done {
				return
			}
		case <-keepAlive.C:
			if err := sse.comment("keep-alive"); err != nil {
				return
			}
		}
	}
}

// catchUp sends what the store has after the last sent seq; done is true
// once the terminal event went out.
func (s *Server) catchUp(ctx context.Context, sse *sseWriter, runID string) (done bool, err error) {
	evs, err := s.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: runID, AfterSeq: sse.last})
	if err != nil {
		s.log.Warn("read events from the store", "run", runID, "err", err)
		return false, err
	}
	for _, ev := range evs {
		if err := sse.send(ev); err != nil {
			return false, err
		}
		if ev.Terminal() {
			return true, nil
		}
	}
	return false, nil
}

// resumePoint is the seq a client resumes after: the Last-Event-ID
// header, else ?after=, else 0 (from the start).
func resumePoint(r *http.Request) (int64, error) {
	name, v := lastEventID(r)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errBadRequest("%s %q is not an event seq: give the id of the last event received (0 for all)", name, v)
	}
	return n, nil
}

// lastEventID is what a client resumes after, and where it said so: the
// Last-Event-ID header (an EventSource's), else ?after=.
func lastEventID(r *http.Request) (name, value string) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		return "Last-Event-ID", v
	}
	return "after", r.URL.Query().Get("after")
}

type sseWriter struct {
	w    http.ResponseWriter
	f    http.Flusher
	last int64
}

// sseFlusher is how an event stream sends each event at once.
func sseFlusher(w http.ResponseWriter) (http.Flusher, error) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, errors.New("response writer cannot stream")
	}
	return f, nil
}

// startSSE sends the headers of an event stream.
func startSSE(w http.ResponseWriter, flusher http.Flusher) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
}

// send writes a run's event with its seq as the id.
func (s *sseWriter) send(ev agentfleet.Event) error {
	if err := s.sendAt(strconv.FormatInt(ev.Seq, 10), ev); err != nil {
		return err
	}
	s.last = ev.Seq
	return nil
}

func (s *sseWriter) sendAt(id string, ev agentfleet.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "id: %s\nevent: %s\ndata: %s\n\n", id, ev.Type, data); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// drainChunks sends the chunks waiting in chunks, without waiting for
// more.
func (s *sseWriter) drainChunks(chunks <-chan agentfleet.Event) error {
	for {
		select {
		case ev := <-chunks:
			if err := s.chunk(ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// chunk writes a response chunk: no id, so resuming skips it.
func (s *sseWriter) chunk(ev agentfleet.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", ev.Type, data); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}
