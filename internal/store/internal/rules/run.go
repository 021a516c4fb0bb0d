package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// RunRow is a run as a backend reads it (driver.RunRow).
type RunRow = driver.RunRow

// Transition returns the run after RunTransition p, applied at now with
// n events appended: the status, error and answer when given (a
// cancellation without an error takes the requested cancel's reason), the
// wake count.
func Transition(r RunRow, p store.RunTransitionParams, now time.Time) RunRow {
	r.Status = p.To
	r.Error = endError(r, p.To, p.Error)
	if p.Answer != nil {
		r.Answer = p.Answer
	}
	if p.IncrementWake {
		r.Wake++
	}
	r.EventSeq += int64(len(p.Events))
	r.UpdatedAt = now
	return r
}

func endError(r RunRow, to agentfleet.RunStatus, msg string) string {
	switch {
	case msg != "":
		return msg
	case to == agentfleet.StatusCancelled && r.Error == "" && r.CancelReason != "":
		return r.CancelReason
	case to == agentfleet.StatusCancelled && r.Error == "":
		return "cancelled"
	}
	return r.Error
}

// CancelAction is what RunCancel does to a run as it is now.
type CancelAction int

const (
	CancelNoop      CancelAction = iota // already cancelled
	CancelNow                           // queued or waiting: cancelled at once
	CancelRequested                     // running: the worker stops it at the next turn boundary
)

// Cancel decides RunCancel for the run as it is now and returns the run
// after it; a run that ended otherwise is ErrConflict.
func Cancel(r RunRow, reason string, nEvents int, now time.Time) (RunRow, CancelAction, error) {
	switch {
	case r.Status == agentfleet.StatusCancelled:
		return r, CancelNoop, nil
	case r.Status.Terminal():
		return r, 0, fmt.Errorf("%w: run %s already ended (%s)", store.ErrConflict, r.ID, r.Status)
	case r.Status == agentfleet.StatusRunning:
		r.CancelRequested = true
		r.CancelReason = reason
		r.UpdatedAt = now
		return r, CancelRequested, nil
	}
	r.Status = agentfleet.StatusCancelled
	r.Error = endError(r, agentfleet.StatusCancelled, reason)
	r.EventSeq += int64(nEvents)
	r.UpdatedAt = now
	return r, CancelNow, nil
}

// ApplyTransition is RunTransition p, checked by RunTransition, applied
// in tx at now.
func ApplyTransition(ctx context.Context, tx driver.Executor, p store.RunTransitionParams, now time.Time) (store.RunChangeResult, error) {
	cur, err := tx.RunLock(ctx, p.ID)
	if err != nil {
		return store.RunChangeResult{}, err
	}
	if err := CheckTransition(cur.Run, p.From, p.To); err != nil {
		return store.RunChangeResult{}, err
	}
	row, err := tx.RunUpdate(ctx, Transition(cur, p, now))
	if err != nil {
		return store.RunChangeResult{}, err
	}
	Number(p.Events, row.Run, cur.EventSeq)
	if err := tx.EventInsert(ctx, row.ID, cur.EventSeq, p.Events); err != nil {
		return store.RunChangeResult{}, err
	}
	next, err := sessionNext(ctx, tx, row)
	if err != nil {
		return store.RunChangeResult{}, err
	}
	return store.RunChangeResult{Run: row.Run, Events: p.Events, SessionNext: next}, nil
}

// ApplyCancel is RunCancel p, with its events evs checked by Events,
// applied in tx at now. A tenant's cancel of another tenant's run is
// store.ErrNotFound.
func ApplyCancel(ctx context.Context, tx driver.Executor, p store.RunCancelParams, evs []agentfleet.Event, now time.Time) (store.RunCancelResult, error) {
	cur, err := tx.RunLock(ctx, p.ID)
	if err != nil {
		return store.RunCancelResult{}, err
	}
	if p.Tenant != "" && cur.Tenant != p.Tenant {
		return store.RunCancelResult{}, fmt.Errorf("run %s: %w", p.ID, store.ErrNotFound)
	}
	next, action, err := Cancel(cur, p.Reason, len(evs), now)
	if err != nil {
		return store.RunCancelResult{}, err
	}
	if action == CancelNoop {
		return store.RunCancelResult{RunChangeResult: store.RunChangeResult{Run: cur.Run}, Immediate: true}, nil
	}
	row, err := tx.RunUpdate(ctx, next)
	if err != nil {
		return store.RunCancelResult{}, err
	}
	if action == CancelRequested {
		return store.RunCancelResult{RunChangeResult: store.RunChangeResult{Run: row.Run}}, nil
	}
	Number(evs, row.Run, cur.EventSeq)
	if err := tx.EventInsert(ctx, row.ID, cur.EventSeq, evs); err != nil {
		return store.RunCancelResult{}, err
	}
	sessionNext, err := sessionNext(ctx, tx, row)
	if err != nil {
		return store.RunCancelResult{}, err
	}
	return store.RunCancelResult{RunChangeResult: store.RunChangeResult{Run: row.Run, Events: evs, SessionNext: sessionNext}, Immediate: true}, nil
}

// RunListQuery is RunList p's query, p checked by RunList and after its
// decoded cursor: the rows of cols, newest first (oldest with p.Oldest),
// one more than p.Limit so that RunPage can tell whether a page follows.
// Each argument is a "?" in the query, in args' order. With statusArray
// the statuses are one array argument, as Postgres has always been asked
// (one statement text, hence one prepared statement and plan, whatever
// the number of statuses); without it, one argument each (SQLite has no
// arrays).
func RunListQuery(cols string, p store.RunListParams, after int64, statusArray bool) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if p.Tenant != "" {
		add("tenant = ?", p.Tenant)
	}
	switch {
	case len(p.Status) > 0 && statusArray:
		ss := make([]string, len(p.Status))
		for i, st := range p.Status {
			ss[i] = string(st)
		}
		add("status = ANY(?)", ss)
	case len(p.Status) > 0:
		ph := make([]string, len(p.Status))
		ss := make([]any, len(p.Status))
		for i, st := range p.Status {
			ph[i], ss[i] = "?", string(st)
		}
		add("status IN ("+strings.Join(ph, ", ")+")", ss...)
	default:
		where = append(where, "status <> '"+BatchAdmitting+"'") // a batch's runs, until it is admitted
	}
	if p.Agent != "" {
		add("agent = ?", p.Agent)
	}
	// The non-empty conditions repeat the partial indexes' predicates, so
	// that a plan made for any value can use them.
	if p.SessionID != "" {
		add("session_id = ? AND session_id <> ''", p.SessionID)
	}
	if p.BatchID != "" {
		add("batch_id = ? AND batch_id <> ''", p.BatchID)
	}
	if p.ParentRunID != "" {
		add("parent_run_id = ? AND parent_run_id <> ''", p.ParentRunID)
	}
	order := "DESC"
	if p.Oldest {
		order = "ASC"
		if after > 0 {
			add("seq > ?", after)
		}
	} else if after > 0 {
		add("seq < ?", after)
	}
	q := `SELECT ` + cols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY seq ` + order + ` LIMIT ?`, append(args, p.Limit+1)
}

// RunPage is RunList p's answer from the rows RunListQuery read.
func RunPage(rs []RunRow, p store.RunListParams) store.RunListResult {
	var res store.RunListResult
	if len(rs) > p.Limit {
		rs = rs[:p.Limit]
		res.NextCursor = EncodeCursor(p.Oldest, rs[len(rs)-1].Seq)
	}
	for _, r := range rs {
		res.Runs = append(res.Runs, r.Run)
	}
	return res
}

// NewRun is the run RunCreate inserts for p at now.
func NewRun(p store.RunCreateParams, now time.Time) agentfleet.Run {
	return agentfleet.Run{
		ID:             p.ID,
		Tenant:         p.Tenant,
		Agent:          p.Agent,
		SessionID:      p.SessionID,
		Status:         agentfleet.StatusQueued,
		Message:        p.Message,
		Context:        p.Context,
		Metadata:       cloneMetadata(p.Metadata),
		IdempotencyKey: p.IdempotencyKey,
		BatchID:        p.BatchID,
		ParentRunID:    p.ParentRunID,
		Depth:          p.Depth,
		MaxTurns:       p.MaxTurns,
		MaxTokens:      p.MaxTokens,
		Deadline:       p.Deadline,
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

func cloneMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// UserStep is the trace's first entry, written when the run is created:
// the task as the user gave it, at turn 0.
func UserStep(r agentfleet.Run) agentfleet.Step {
	return agentfleet.Step{RunID: r.ID, Turn: 0, Index: 0, Kind: agentfleet.StepUser, Content: r.Message, CreatedAt: r.CreatedAt}
}

// RawOrNil returns nil for an empty raw JSON value read back from a
// column, so reads and writes agree on "absent".
func RawOrNil(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// ChildCancelReason is the error of a child run cancelled because its
// parent ended.
func ChildCancelReason(parent agentfleet.Run) string {
	return fmt.Sprintf("parent run %s ended (%s)", parent.ID, parent.Status)
}

// WaitDue reports whether a run waiting for children may resume at now:
// every child it waits for has ended (an id the store does not know
// counts as ended: there is nothing to wait for), or its wait timed out.
func WaitDue(r agentfleet.Run, statuses map[string]agentfleet.RunStatus, now time.Time) bool {
	if r.Status != agentfleet.StatusWaitingChildren {
		return false
	}
	if !r.WaitUntil.IsZero() && !now.Before(r.WaitUntil) {
		return true
	}
	for _, id := range r.WaitIDs {
		if st, ok := statuses[id]; ok && !st.Terminal() {
			return false
		}
	}
	return true
}

// ApplyWake resumes run id, when it waits for children and WaitDue says
// it may, in tx at now: running again, its wake counted (its next turn's
// message id must differ from the one it parked after). woken is false
// when it was not due.
func ApplyWake(ctx context.Context, tx driver.Executor, id string, now time.Time) (res store.RunChangeResult, woken bool, err error) {
	r, err := tx.RunLock(ctx, id)
	if err != nil || r.Status != agentfleet.StatusWaitingChildren {
		return res, false, err
	}
	rows, err := tx.RunStatuses(ctx, r.WaitIDs)
	if err != nil {
		return res, false, err
	}
	statuses := make(map[string]agentfleet.RunStatus, len(rows))
	for _, s := range rows {
		statuses[s.ID] = s.Status
	}
	if !WaitDue(r.Run, statuses, now) {
		return res, false, nil
	}
	r.Status = agentfleet.StatusRunning
	r.Wake++
	r.UpdatedAt = now
	row, err := tx.RunUpdate(ctx, r)
	if err != nil {
		return res, false, err
	}
	return store.RunChangeResult{Run: row.Run}, true, nil
}

// ApplyRunFamilySettle is RunFamilySettle of run id in tx at now: its parent woken when
// due, its unfinished children (and theirs, when cancelled at once)
// cancelled. The ended run itself is read, not locked: it can no longer
// change, and locking only parents upwards, then children downwards,
// keeps two families' RunFamilySettle from deadlocking.
func ApplyRunFamilySettle(ctx context.Context, tx driver.Executor, id string, now time.Time) (store.RunFamilySettleResult, error) {
	var res store.RunFamilySettleResult
	ended, err := tx.RunGet(ctx, id)
	if err != nil || !ended.Status.Terminal() {
		return res, err
	}
	if ended.ParentRunID != "" {
		ch, woken, err := ApplyWake(ctx, tx, ended.ParentRunID, now)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return res, err
		}
		if woken {
			res.Changes = append(res.Changes, ch)
			res.Woken = append(res.Woken, ch.Run)
		}
	}
	if err := cancelChildren(ctx, tx, ended.Run, now, &res); err != nil {
		return res, err
	}
	if ended.BatchID != "" {
		released, err := ApplyBatchRelease(ctx, tx, ended.BatchID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return res, err
		}
		res.Released = released
	}
	return res, nil
}

// cancelChildren cancels parent's unfinished children, and the children
// of those cancelled at once, into res.
func cancelChildren(ctx context.Context, tx driver.Executor, parent agentfleet.Run, now time.Time, res *store.RunFamilySettleResult) error {
	todo := []agentfleet.Run{parent}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		kids, err := tx.RunChildrenUnfinished(ctx, p.ID)
		if err != nil {
			return err
		}
		reason := ChildCancelReason(p)
		for _, kid := range kids {
			cur, err := tx.RunGet(ctx, kid)
			if err != nil {
				return err
			}
			evs, err := Events([]agentfleet.Event{
				{Type: agentfleet.EventCancelled, Turn: cur.Turn, Summary: reason},
				{Type: agentfleet.EventDone, Turn: cur.Turn, Summary: string(agentfleet.StatusCancelled)},
			}, 0, now)
			if err != nil {
				return err
			}
			cres, err := ApplyCancel(ctx, tx, store.RunCancelParams{ID: kid, Reason: reason}, evs, now)
			if errors.Is(err, store.ErrConflict) {
				continue // ended meanwhile
			}
			if err != nil {
				return err
			}
			switch {
			case !cres.Immediate:
				res.Stopping = append(res.Stopping, cres.Run)
			case len(cres.Events) > 0:
				res.Changes = append(res.Changes, cres.RunChangeResult)
				todo = append(todo, cres.Run)
			}
		}
	}
	return nil
}

// ChildrenDueLimitDefault bounds one RunFamilySettleDue call when its caller
// names no limit.
const ChildrenDueLimitDefault = 100

// ChildrenDueLimit is RunFamilySettleDue's limit: n, or the default.
func ChildrenDueLimit(n int) int {
	if n <= 0 {
		return ChildrenDueLimitDefault
	}
	return n
}

// SettleChildrenDue is RunFamilySettleDue once a backend has found what is
// due: each waiter woken in a transaction of its own (wake, ApplyWake
// in it), each ended parent settled (RunFamilySettle).
func SettleChildrenDue(ctx context.Context, waiters, ended []string,
	wake func(ctx context.Context, id string) (store.RunChangeResult, bool, error),
	settle func(ctx context.Context, id string) (store.RunFamilySettleResult, error)) (store.RunFamilySettleResult, error) {
	var res store.RunFamilySettleResult
	for _, id := range waiters {
		ch, woken, err := wake(ctx, id)
		if err != nil {
			return res, fmt.Errorf("wake run %s: %w", id, err)
		}
		if woken {
			res.Changes = append(res.Changes, ch)
			res.Woken = append(res.Woken, ch.Run)
		}
	}
	for _, id := range ended {
		r, err := settle(ctx, id)
		if err != nil {
			return res, err
		}
		res.Add(r)
	}
	return res, nil
}

func (s *Store) RunTransition(ctx context.Context, p store.RunTransitionParams) (store.RunChangeResult, error) {
	now := Now()
	p, err := RunTransition(p, now)
	if err != nil {
		return store.RunChangeResult{}, err
	}
	var res store.RunChangeResult
	err = s.d.Tx(ctx, func(x driver.Executor) (err error) {
		res, err = ApplyTransition(ctx, x, p, now)
		return err
	})
	if err != nil {
		return store.RunChangeResult{}, fmt.Errorf("move run %s to %s: %w", p.ID, p.To, err)
	}
	return res, nil
}

func (s *Store) RunCancel(ctx context.Context, p store.RunCancelParams) (store.RunCancelResult, error) {
	now := Now()
	p, err := RunCancel(p, now)
	if err != nil {
		return store.RunCancelResult{}, err
	}
	var res store.RunCancelResult
	err = s.d.Tx(ctx, func(x driver.Executor) (err error) {
		res, err = ApplyCancel(ctx, x, p, p.Events, now)
		return err
	})
	if err != nil {
		return store.RunCancelResult{}, fmt.Errorf("cancel run %s: %w", p.ID, err)
	}
	return res, nil
}

// RunCreate validates p and fills its defaults: a fresh id, the default
// agent, timestamps normalised.
func RunCreate(p store.RunCreateParams) (store.RunCreateParams, error) {
	if p.ID == "" {
		p.ID = NewID()
	} else if err := CheckID("run id", p.ID); err != nil {
		return p, err
	}
	if err := CheckID("tenant id", p.Tenant); err != nil {
		return p, err
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	if p.MaxTurns < 0 || p.MaxTokens < 0 {
		return p, Invalidf("run %s: max turns and max tokens must not be negative (zero means the default)", p.ID)
	}
	if p.Depth < 0 || (p.Depth > 0) != (p.ParentRunID != "") {
		return p, Invalidf("run %s: a child run names its parent and a depth from 1", p.ID)
	}
	if p.ParentRunID != "" {
		if err := CheckID("parent run id", p.ParentRunID); err != nil {
			return p, err
		}
	}
	if err := CheckJSON("run context", p.Context); err != nil {
		return p, err
	}
	// Submitted by a client: refused, not cleaned (see text.go).
	if err := checkTexts("message", p.Message, "agent", p.Agent, "session id", p.SessionID,
		"idempotency key", p.IdempotencyKey, "batch id", p.BatchID); err != nil {
		return p, err
	}
	if err := CheckMetadata("metadata", p.Metadata); err != nil {
		return p, err
	}
	if err := CheckJSONText("context", p.Context); err != nil {
		return p, err
	}
	p.Context = NullJSON(p.Context)
	p.Deadline = Time(p.Deadline)
	return p, nil
}

// RunTransition validates p.
func RunTransition(p store.RunTransitionParams, now time.Time) (store.RunTransitionParams, error) {
	if p.ID == "" {
		return p, Invalidf("run transition: run id is empty")
	}
	if !p.To.Valid() {
		return p, Invalidf("run %s: unknown status %q", p.ID, p.To)
	}
	for _, s := range p.From {
		if !s.Valid() {
			return p, Invalidf("run %s: unknown status %q", p.ID, s)
		}
	}
	if err := CheckJSON("answer", p.Answer); err != nil {
		return p, err
	}
	p.Answer = CleanJSON(NullJSON(p.Answer))
	p.Error = Clean(p.Error)
	var err error
	p.Events, err = Events(p.Events, 0, now)
	return p, err
}

// RunCancel validates p and cleans its reason and events.
func RunCancel(p store.RunCancelParams, now time.Time) (store.RunCancelParams, error) {
	if p.ID == "" {
		return p, Invalidf("run cancel: run id is empty")
	}
	p.Reason = Clean(p.Reason)
	var err error
	p.Events, err = Events(p.Events, 0, now)
	return p, err
}
