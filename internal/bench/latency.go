package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
)

// latency submits runs one at a time on an otherwise idle fleet and times
// each step a user or a consumer sees:
//   - submit -> the model's first request for the run;
//   - the model's reply to turn k -> its request for turn k+1;
//   - an event's ts -> its arrival at an SSE client and at a NATS
//     subscriber (upper bounds: ts is set just before the commit);
//   - submit -> the done event at the SSE client;
//   - with a streaming model (the fleet's default; pad the replies with
//     --completion-tokens so they come in many chunks), a streamed chunk
//     leaving the fake model -> its response_chunk at the SSE client and
//     at a NATS subscriber of the tenant's chunks.
//
// The SSE stream of a run can only be opened once the run exists, so the
// fake model holds its reply to the run's first turn until the stream has
// delivered its first event: every event after that is live, and events
// stamped before the stream was open are not counted for SSE.
func (e *env) latency(ctx context.Context) error {
	if err := e.warmup(ctx, min(e.cfg.Warmup, 8)); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "latency")
	if err != nil {
		return err
	}

	var natsMu sync.Mutex
	var natsLat []time.Duration
	natsDone := map[string]chan struct{}{}
	natsDoneFor := func(runID string) chan struct{} {
		ch, ok := natsDone[runID]
		if !ok {
			ch = make(chan struct{})
			natsDone[runID] = ch
		}
		return ch
	}
	type natsChunk struct {
		ev agentfleet.Event
		at time.Time
	}
	var natsChunks []natsChunk
	haveNATS := false
	if url := e.fleet.natsURL(); url != "" {
		b, err := bus.Connect(ctx, bus.Config{URL: url, CredsFile: e.fleet.natsCreds(), Name: "agentctl-bench-subscriber", Observer: true})
		if err != nil {
			return fmt.Errorf("connect the NATS subscriber to %s: %w", url, err)
		}
		defer b.Close()
		unsubscribe, err := b.SubscribeEvents(ctx, bus.EventFilter{Tenant: t.id}, func(ev agentfleet.Event) {
			now := time.Now()
			natsMu.Lock()
			defer natsMu.Unlock()
			natsLat = append(natsLat, now.Sub(ev.TS))
			if ev.Terminal() {
				ch := natsDoneFor(ev.RunID)
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		})
		if err != nil {
			return fmt.Errorf("subscribe to events: %w", err)
		}
		defer unsubscribe()
		stopChunks, err := b.SubscribeChunks(ctx, t.id, "", func(ev agentfleet.Event) {
			now := time.Now()
			natsMu.Lock()
			defer natsMu.Unlock()
			natsChunks = append(natsChunks, natsChunk{ev, now})
		})
		if err != nil {
			return fmt.Errorf("subscribe to response chunks: %w", err)
		}
		defer stopChunks()
		haveNATS = true
	} else {
		e.rep.note("no NATS subscriber: the fleet's NATS URL is unknown (pass --nats-url with --url)")
	}

	var gatesMu sync.Mutex
	gates := map[string]chan struct{}{}
	e.model.setTiming(true, func(task string, turn int) {
		if turn != 1 {
			return
		}
		gatesMu.Lock()
		g := gates[task]
		gatesMu.Unlock()
		if g == nil {
			return
		}
		select {
		case <-g:
		case <-time.After(5 * time.Second):
		}
	})
	defer e.model.setTiming(false, nil)

	var submitToFirst, turnGaps, sse, toDone, chunkSSE []time.Duration
	var subs []submission
	taskOf := map[string]string{} // run id -> task, for the NATS chunks
	// A chunk is timed from its first byte's piece at the fake model:
	// the bytes of a turn's chunks before it are its offset.
	type chunkTurn struct {
		run  string
		turn int
	}
	offsets := func() func(ev agentfleet.Event) int {
		at := map[chunkTurn]int{}
		return func(ev agentfleet.Event) int {
			k := chunkTurn{ev.RunID, ev.Turn}
			if ev.Index == 1 {
				at[k] = 0 // a restarted reply starts again
			}
			off := at[k]
			at[k] += len(ev.Text)
			return off
		}
	}
	sseOffset, natsOffset := offsets(), offsets()
	submitErrs := 0
	e.startProgress(func(elapsed time.Duration) string {
		return fmt.Sprintf("%s latency: %d/%d runs done", elapsed, len(toDone), e.cfg.Runs)
	})
	for i := range e.cfg.Runs {
		if ctx.Err() != nil {
			break
		}
		task := taskMessage(t.tag, i, e.cfg.Turns)
		gate := make(chan struct{})
		var gateOnce sync.Once
		openGate := func() { gateOnce.Do(func() { close(gate) }) }
		gatesMu.Lock()
		gates[task] = gate
		gatesMu.Unlock()

		s, err := e.submitOne(ctx, t, i)
		if err != nil {
			submitErrs++
			openGate()
			continue
		}
		subs = append(subs, s)
		taskOf[s.id] = task
		var streamOpen, doneAt time.Time
		rctx, cancel := context.WithTimeout(ctx, e.cfg.Stall)
		err = t.c.Events(rctx, s.id, 0, func(ev agentfleet.Event) error {
			now := time.Now()
			if ev.Type == agentfleet.EventResponseChunk {
				if sent, ok := e.model.chunkAt(task, ev.Turn, sseOffset(ev)); ok {
					chunkSSE = append(chunkSSE, now.Sub(sent))
				}
				return nil
			}
			if streamOpen.IsZero() {
				streamOpen = now
				openGate()
			}
			if !ev.TS.Before(streamOpen) {
				sse = append(sse, now.Sub(ev.TS))
			}
			if ev.Terminal() {
				doneAt = now
			}
			return nil
		})
		cancel()
		openGate()
		if err != nil {
			e.rep.note("run %s: events: %v", s.id, err)
			continue
		}
		toDone = append(toDone, doneAt.Sub(s.at))
		if req, ok := e.model.requestAt(task, 1); ok {
			submitToFirst = append(submitToFirst, req.Sub(s.at))
		}
		for k := 1; k < e.cfg.Turns; k++ {
			rep, ok1 := e.model.replyAt(task, k)
			req, ok2 := e.model.requestAt(task, k+1)
			if ok1 && ok2 {
				turnGaps = append(turnGaps, req.Sub(rep))
			}
		}
		if haveNATS {
			// The NATS subscriber sees the run's last event too before
			// the next run starts, so runs never overlap.
			natsMu.Lock()
			ch := natsDoneFor(s.id)
			natsMu.Unlock()
			select {
			case <-ch:
			case <-time.After(2 * time.Second):
				e.rep.note("run %s: the NATS subscriber did not see its done event within 2s", s.id)
			case <-ctx.Done():
			}
		}
	}
	e.stopProgress()

	counts, _, _, err := e.collect(ctx, t, subs, submitErrs)
	if err != nil {
		return err
	}
	e.rep.Figures.Runs = counts
	f := &LatencyFigures{
		SubmitToFirstModelRequest: summarize(submitToFirst),
		TurnToNextTurn:            summarize(turnGaps),
		CommitToSSE:               summarize(sse),
		SubmitToDone:              summarize(toDone),
	}
	if haveNATS {
		natsMu.Lock()
		s := summarize(natsLat)
		natsMu.Unlock()
		f.CommitToNATS = &s
	}
	if len(chunkSSE) > 0 {
		s := summarize(chunkSSE)
		f.ChunkToSSE = &s
	}
	if haveNATS {
		natsMu.Lock()
		var lat []time.Duration
		for _, c := range natsChunks {
			if sent, ok := e.model.chunkAt(taskOf[c.ev.RunID], c.ev.Turn, natsOffset(c.ev)); ok {
				lat = append(lat, c.at.Sub(sent))
			}
		}
		natsMu.Unlock()
		if len(lat) > 0 {
			s := summarize(lat)
			f.ChunkToNATS = &s
		}
	}
	e.rep.Figures.Latency = f
	e.rep.note("commit -> SSE/NATS are measured from each event's ts, which is set when the turn's events are made, just before the commit: upper bounds of commit-to-delivery")
	e.rep.checkRuns()
	e.rep.check("every run timed", len(toDone) == counts.Submitted && len(submitToFirst) == counts.Submitted, false,
		"%d runs followed to done, %d first model requests matched", len(toDone), len(submitToFirst))
	return nil
}
