package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentfleet/agentfleet"
)

// turnJournal is a turn's agentfleet.Journal over Config.Journal: it reads
// the entries an earlier attempt of the turn recorded (once, at the first
// journaled call; on a first attempt too, which a redelivery can be taken
// for, so a turn without side effects reads nothing), checks each call against
// the one recorded at its index, and records the calls made now. An ai()
// sub-call is charged in the same write as its entry, so a turn executed
// again neither calls the model again nor bills it twice.
type turnJournal struct {
	t *turn

	once     sync.Once
	recorded map[int]agentfleet.JournalEntry
	loadErr  error

	mu sync.Mutex
	// pending are the ai() calls made and not yet recorded, by index:
	// their reservations are settled by their record.
	pending map[int]pendingCharge
}

type pendingCharge struct {
	res  *agentfleet.Reservation
	resp agentfleet.ModelResponse
}

func (j *turnJournal) Replay(ctx context.Context, call agentfleet.JournalEntry) (agentfleet.JournalEntry, bool, error) {
	t := j.t
	j.once.Do(func() {
		entries, err := t.e.cfg.Journal.JournalList(ctx, t.run.ID, t.n)
		if err != nil {
			j.loadErr = fmt.Errorf("load the journal of turn %d: %w", t.n, err)
			return
		}
		j.recorded = make(map[int]agentfleet.JournalEntry, len(entries))
		for _, e := range entries {
			j.recorded[e.Index] = e
		}
	})
	if j.loadErr != nil {
		return agentfleet.JournalEntry{}, false, j.loadErr
	}
	rec, ok := j.recorded[call.Index]
	if !ok {
		return rec, false, nil
	}
	if rec.Primitive != call.Primitive || rec.Method != call.Method || rec.URL != call.URL {
		return rec, false, &agentfleet.JournalMismatchError{Recorded: rec, Call: call}
	}
	// What the call did to the turn, done again without the call.
	switch rec.Primitive {
	case "ai", "aiJSON":
		t.mu.Lock()
		t.calls++
		t.mu.Unlock()
		if rec.Error == "" {
			t.emit(agentfleet.Event{Type: agentfleet.EventModelCall, Summary: rec.Primitive + "() replayed from the journal",
				Tokens: &agentfleet.Tokens{Prompt: rec.Usage.PromptTokens, Completion: rec.Usage.CompletionTokens}})
		}
	case "spawn":
		var id string
		if rec.Error == "" && json.Unmarshal(rec.Result, &id) == nil {
			t.mu.Lock()
			t.spawned++
			t.mu.Unlock()
			t.emit(agentfleet.Event{Type: agentfleet.EventChildSpawned, Summary: id})
		}
	}
	return rec, true, nil
}

func (j *turnJournal) Record(ctx context.Context, e agentfleet.JournalEntry) error {
	j.mu.Lock()
	pc, hasCharge := j.pending[e.Index]
	delete(j.pending, e.Index)
	j.mu.Unlock()
	t := j.t
	var existed, charged bool
	err := t.e.retryRecord(ctx, func() error {
		var err error
		existed, charged, err = t.e.cfg.Journal.JournalRecord(ctx, e, pc.res, pc.resp.Model)
		return err
	})
	switch {
	case !hasCharge || charged:
	case err != nil || existed:
		// Not this call's entry: another attempt of the turn recorded
		// the call first, or the turn runs again and makes it again. An
		// ai() call is billed once, with its entry; this one is not, as
		// one a crash interrupts is not.
		t.e.release(ctx, pc.res)
	default:
		// Recorded, but the reservation was gone: charge it apart.
		err = t.e.settle(ctx, t.run, pc.res, pc.resp)
	}
	if err != nil {
		return fmt.Errorf("record call %d of turn %d: %w", e.Index, t.n, err)
	}
	return nil
}

// call makes an ai() sub-call whose charge waits for its journal entry.
func (j *turnJournal) call(ctx context.Context, index int, req agentfleet.ModelRequest, tokens int64) (agentfleet.ModelResponse, error) {
	res, err := j.t.e.reserve(ctx, j.t.run, tokens)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	resp, err := j.t.e.call(ctx, j.t.run, req, res)
	if err != nil {
		return resp, err
	}
	j.mu.Lock()
	j.pending[index] = pendingCharge{res: res, resp: resp}
	j.mu.Unlock()
	return resp, nil
}

// settlePending releases the reservations of the ai() calls the sandbox
// recorded no entry for (the turn was stopped, or an earlier record
// failed): the turn runs again, or ends, without their outcome.
func (j *turnJournal) settlePending(ctx context.Context) error {
	j.mu.Lock()
	pending := j.pending
	j.pending = map[int]pendingCharge{}
	j.mu.Unlock()
	for _, pc := range pending {
		j.t.e.release(ctx, pc.res)
	}
	return nil
}
