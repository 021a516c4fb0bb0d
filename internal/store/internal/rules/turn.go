package rules

import (
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Events validates events to append and fills what the caller may leave
// out: the version, the timestamp (now) and, when turn is positive and the
// event names none, the turn. Seq and the run's identity are filled by
// Number once the store knows them.
func Events(in []agentfleet.Event, turn int, now time.Time) ([]agentfleet.Event, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]agentfleet.Event, len(in))
	for i, e := range in {
		if e.Type == "" {
			return nil, Invalidf("event %d has no type", i)
		}
		if e.Turn < 0 {
			return nil, Invalidf("event %d has a negative turn", i)
		}
		if err := CheckJSON("event args", e.Args); err != nil {
			return nil, err
		}
		if e.Tokens != nil && (e.Tokens.Prompt < 0 || e.Tokens.Completion < 0) {
			return nil, Invalidf("event %d has negative tokens", i)
		}
		e.V = agentfleet.EventVersion
		e.Type = agentfleet.EventType(Clean(string(e.Type)))
		e.Content, e.Summary = Clean(e.Content), Clean(e.Summary)
		e.Args = CleanJSON(NullJSON(e.Args))
		if e.Turn == 0 && turn > 0 {
			e.Turn = turn
		}
		if e.TS.IsZero() {
			e.TS = now
		} else {
			e.TS = Time(e.TS)
		}
		if e.Tokens != nil {
			t := *e.Tokens
			e.Tokens = &t
		}
		out[i] = e
	}
	return out, nil
}

// Number stamps events with their run and their seq, continuing after
// lastSeq.
func Number(evs []agentfleet.Event, run agentfleet.Run, lastSeq int64) {
	for i := range evs {
		evs[i].RunID = run.ID
		evs[i].Tenant = run.Tenant
		evs[i].SessionID = run.SessionID
		evs[i].Seq = lastSeq + int64(i) + 1
	}
}

// Steps validates the steps of a turn commit and fills them in: they all
// belong to the committed turn, numbered by their position.
func Steps(in []agentfleet.Step, runID string, turn int, now time.Time) ([]agentfleet.Step, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]agentfleet.Step, len(in))
	for i, s := range in {
		if s.Kind == "" {
			return nil, Invalidf("step %d of turn %d has no kind", i, turn)
		}
		if s.Turn != 0 && s.Turn != turn {
			return nil, Invalidf("step %d names turn %d in the commit of turn %d", i, s.Turn, turn)
		}
		if s.Usage.PromptTokens < 0 || s.Usage.CompletionTokens < 0 {
			return nil, Invalidf("step %d of turn %d has negative usage", i, turn)
		}
		s.RunID, s.Turn, s.Index = runID, turn, i
		s.Content, s.Model = Clean(s.Content), Clean(s.Model)
		if s.CreatedAt.IsZero() {
			s.CreatedAt = now
		} else {
			s.CreatedAt = Time(s.CreatedAt)
		}
		out[i] = s
	}
	return out, nil
}

// TurnCommit validates p and fills in its steps and events.
func TurnCommit(p store.TurnCommitParams, now time.Time) (store.TurnCommitParams, error) {
	if p.RunID == "" {
		return p, Invalidf("turn commit: run id is empty")
	}
	if p.Turn < 1 {
		return p, Invalidf("run %s: turn %d: turns count from 1", p.RunID, p.Turn)
	}
	if !p.Status.Valid() {
		return p, Invalidf("run %s: unknown status %q", p.RunID, p.Status)
	}
	if p.Usage.PromptTokens < 0 || p.Usage.CompletionTokens < 0 || p.DataBytesCarried < 0 {
		return p, Invalidf("run %s: turn %d: usage and carried bytes must not be negative", p.RunID, p.Turn)
	}
	if p.Spawned < 0 {
		return p, Invalidf("run %s: turn %d: spawned children must not be negative", p.RunID, p.Turn)
	}
	if (p.Status == agentfleet.StatusWaitingChildren) != (len(p.WaitIDs) > 0) {
		return p, Invalidf("run %s: turn %d: a run waits for children (status %s) exactly when the commit names them", p.RunID, p.Turn, agentfleet.StatusWaitingChildren)
	}
	for _, id := range p.WaitIDs {
		if err := CheckID("waited child id", id); err != nil {
			return p, err
		}
	}
	p.WaitUntil = Time(p.WaitUntil)
	if err := CheckJSON("carried args", p.Args); err != nil {
		return p, err
	}
	if err := CheckJSON("answer", p.Answer); err != nil {
		return p, err
	}
	p.Args, p.Answer = CleanJSON(NullJSON(p.Args)), CleanJSON(NullJSON(p.Answer))
	p.Error = Clean(p.Error)
	var err error
	if p.Steps, err = Steps(p.Steps, p.RunID, p.Turn, now); err != nil {
		return p, err
	}
	if p.Events, err = Events(p.Events, p.Turn, now); err != nil {
		return p, err
	}
	return p, nil
}

// TurnLoad validates p.
func TurnLoad(p store.TurnLoadParams) error {
	switch {
	case p.RunID == "":
		return Invalidf("turn load: run id is empty")
	case p.Turn < 1:
		return Invalidf("turn load of run %s: turn %d is not positive", p.RunID, p.Turn)
	case p.HistoryFrom < 0:
		return Invalidf("turn load of run %s: history from turn %d is negative", p.RunID, p.HistoryFrom)
	}
	return nil
}
