package rules

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// The reads of runs and of what a run holds (steps, events, replies,
// journal), and the writes outside a turn that are one statement.

// RunGetByID scopes the read to p.Tenant when it is set: another
// tenant's run is not found.
func (s *Store) RunGetByID(ctx context.Context, p store.RunGetByIDParams) (agentfleet.Run, error) {
	r, err := s.d.RunGet(ctx, p.ID)
	if err == nil && p.Tenant != "" && r.Tenant != p.Tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return agentfleet.Run{}, fmt.Errorf("get run %s: %w", p.ID, err)
	}
	return r.Run, nil
}

func (s *Store) RunList(ctx context.Context, p store.RunListParams) (store.RunListResult, error) {
	p, after, err := RunList(p)
	if err != nil {
		return store.RunListResult{}, err
	}
	rs, err := s.d.RunList(ctx, p, after)
	if err != nil {
		return store.RunListResult{}, fmt.Errorf("list runs: %w", err)
	}
	return RunPage(rs, p), nil
}

func (s *Store) RunCountActive(ctx context.Context, tenant string) (int, error) {
	n, err := s.d.RunCountActive(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("count active runs of %s: %w", tenant, err)
	}
	return n, nil
}

func (s *Store) RunCountByStatus(ctx context.Context, tenant string) (map[agentfleet.RunStatus]int, error) {
	cs, err := s.d.RunCountByStatus(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("count runs of %s by status: %w", tenant, err)
	}
	out := make(map[agentfleet.RunStatus]int, len(cs))
	for _, c := range cs {
		out[agentfleet.RunStatus(c.Key)] = c.N
	}
	return out, nil
}

func (s *Store) RunDeleteEnded(ctx context.Context, p store.RunDeleteEndedParams) (int, error) {
	p, err := RunDeleteEnded(p)
	if err != nil {
		return 0, err
	}
	n, err := s.d.RunDeleteEnded(ctx, p.EndedBefore, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("delete runs ended before %s: %w", p.EndedBefore.Format(time.RFC3339), err)
	}
	return n, nil
}

func (s *Store) StepListByRun(ctx context.Context, p store.StepListByRunParams) ([]agentfleet.Step, error) {
	steps, err := s.d.StepList(ctx, p.RunID, p.FromTurn, math.MaxInt32)
	if err != nil {
		return nil, fmt.Errorf("list steps of run %s: %w", p.RunID, err)
	}
	return steps, nil
}

func (s *Store) EventListByRun(ctx context.Context, p store.EventListByRunParams) ([]agentfleet.Event, error) {
	evs, err := s.d.EventList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", p.RunID, err)
	}
	return evs, nil
}

// EventAppend numbers the events after the run's last, in the one write
// that stores them.
func (s *Store) EventAppend(ctx context.Context, p store.EventAppendParams) ([]agentfleet.Event, error) {
	evs, err := Events(p.Events, 0, Now())
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	r, last, err := s.d.EventAppend(ctx, p.RunID, evs)
	if err != nil {
		return nil, fmt.Errorf("append %d events to run %s: %w", len(evs), p.RunID, err)
	}
	Number(evs, r, last)
	return evs, nil
}

func (s *Store) ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error) {
	m, err := s.d.ModelReplyGet(ctx, runID, turn)
	if err != nil {
		return store.ModelReply{}, fmt.Errorf("get model reply of run %s turn %d: %w", runID, turn, err)
	}
	return m, nil
}

// RunList validates p and fills its defaults; it returns the position the
// cursor continues after (zero: from the start).
func RunList(p store.RunListParams) (store.RunListParams, int64, error) {
	if p.Limit < 0 {
		return p, 0, Invalidf("run list: limit must not be negative")
	}
	if p.Limit == 0 {
		p.Limit = RunListLimitDefault
	}
	p.Limit = min(p.Limit, RunListLimitMax)
	for _, s := range p.Status {
		if !s.Valid() {
			return p, 0, Invalidf("run list: unknown status %q", s)
		}
	}
	if err := checkTexts("run list: tenant", p.Tenant, "run list: agent", p.Agent, "run list: session id", p.SessionID,
		"run list: batch id", p.BatchID); err != nil {
		return p, 0, err
	}
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, p.Oldest)
	return p, after, err
}

// sessionNext is what ended's end hands out inside its transaction: its
// session's next queued run, when ended was the session's head.
func sessionNext(ctx context.Context, tx driver.Executor, ended RunRow) (*agentfleet.Run, error) {
	if ended.SessionID == "" || !ended.Status.Terminal() {
		return nil, nil
	}
	head, err := tx.RunSessionHead(ctx, ended.Tenant, ended.SessionID)
	if err != nil || head == nil {
		return nil, err
	}
	return SessionHead(ended.Seq, &head.Run, head.Seq), nil
}

// SessionHead decides what a run's end hands out: head is the oldest
// unfinished run of the session after the change (nil if none) and seq
// its position. Only when the ended run was the session's head (nothing
// unfinished before it) does the next queued run become the head.
func SessionHead(endedSeq int64, head *agentfleet.Run, headSeq int64) *agentfleet.Run {
	if head == nil || headSeq < endedSeq || head.Status != agentfleet.StatusQueued {
		return nil
	}
	return head
}
