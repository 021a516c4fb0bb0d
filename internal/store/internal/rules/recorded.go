package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// A turn's model reply and journal entries are recorded by one fenced
// insert in each backend (PostgreSQL through its pipeline, SQLite in the
// group commit). When the insert did nothing, why is decided here, once:
// ReplyExisting and JournalExisting read through x the run and what the
// turn has. The run missing or fenced off is that error; found is the
// record there already. Neither (found false, err nil) means the run
// moved between the statements: a caller outside a transaction tries
// again, one inside it cannot see that happen.

// ReplyExisting is why the reply of run runID's turn was not inserted.
func ReplyExisting(ctx context.Context, x driver.Executor, runID string, turn int) (store.ModelReply, bool, error) {
	if err := fenced(ctx, x, runID, turn); err != nil {
		return store.ModelReply{}, false, err
	}
	old, err := x.ModelReplyGet(ctx, runID, turn)
	return old, err == nil, notFoundIsNil(err)
}

// JournalExisting is why journal entry e was not inserted.
func JournalExisting(ctx context.Context, x driver.Executor, e agentfleet.JournalEntry) (agentfleet.JournalEntry, bool, error) {
	if err := fenced(ctx, x, e.RunID, e.Turn); err != nil {
		return agentfleet.JournalEntry{}, false, err
	}
	old, err := x.JournalGet(ctx, e.RunID, e.Turn, e.Index)
	return old, err == nil, notFoundIsNil(err)
}

// fenced is the commit fence of a record of run runID's turn: the run
// exists, has committed turn-1 turns and has not ended.
func fenced(ctx context.Context, x driver.Executor, runID string, turn int) error {
	cur, err := x.RunGet(ctx, runID)
	if err != nil {
		return err
	}
	return CheckCommitFence(cur.Run, turn, "")
}

// recordAttempts bounds how often a record is tried again when its run
// moved between the insert and the read of why it did nothing.
const recordAttempts = 3

// ModelReplyRecord validates p, inserts the reply (charging it when it
// did) and, when it did not, returns the reply there already or the
// fence's error.
func (s *Store) ModelReplyRecord(ctx context.Context, p store.ModelReplyRecordParams) (store.ModelReplyRecordResult, error) {
	p, err := ModelReplyRecord(p, Now())
	if err != nil {
		return store.ModelReplyRecordResult{}, err
	}
	r := p.ModelReply
	old, err := record(ctx, func() (store.ModelReplyRecordResult, bool, error) { return s.d.ModelReplyInsert(ctx, p) },
		func() (store.ModelReply, bool, error) { return ReplyExisting(ctx, s.d, r.RunID, r.Turn) })
	if err != nil {
		return store.ModelReplyRecordResult{}, fmt.Errorf("record model reply of run %s turn %d: %w", r.RunID, r.Turn, err)
	}
	if old.existed {
		return store.ModelReplyRecordResult{Reply: old.old, Existed: true}, nil
	}
	return old.res, nil
}

// JournalRecord is ModelReplyRecord's counterpart for a journal entry.
func (s *Store) JournalRecord(ctx context.Context, p store.JournalRecordParams) (store.JournalRecordResult, error) {
	p, err := JournalRecord(p, Now())
	if err != nil {
		return store.JournalRecordResult{}, err
	}
	e := p.JournalEntry
	old, err := record(ctx, func() (store.JournalRecordResult, bool, error) { return s.d.JournalInsert(ctx, p) },
		func() (agentfleet.JournalEntry, bool, error) { return JournalExisting(ctx, s.d, e) })
	if err != nil {
		return store.JournalRecordResult{}, fmt.Errorf("record journal entry %d of run %s turn %d: %w", e.Index, e.RunID, e.Turn, err)
	}
	if old.existed {
		return store.JournalRecordResult{Entry: old.old, Existed: true}, nil
	}
	return old.res, nil
}

// recorded is what record decided: the insert's result, or the record
// found there already (existed).
type recorded[R, T any] struct {
	res     R
	old     T
	existed bool
}

// record runs insert and, when it inserted nothing, existing; a fence
// that passes with nothing there means the run moved between the two,
// and it tries again.
func record[R, T any](ctx context.Context, insert func() (R, bool, error), existing func() (T, bool, error)) (recorded[R, T], error) {
	for range recordAttempts {
		res, inserted, err := insert()
		if err != nil {
			return recorded[R, T]{}, err
		}
		if inserted {
			return recorded[R, T]{res: res}, nil
		}
		old, found, err := existing()
		if err != nil {
			return recorded[R, T]{}, err
		}
		if found {
			return recorded[R, T]{old: old, existed: true}, nil
		}
	}
	return recorded[R, T]{}, fmt.Errorf("%w: the run kept changing", store.ErrConflict)
}

func notFoundIsNil(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// ModelReplyRecord validates p, its charge included, and fills its
// defaults.
func ModelReplyRecord(p store.ModelReplyRecordParams, now time.Time) (store.ModelReplyRecordParams, error) {
	var err error
	if p.ModelReply, err = ModelReply(p.ModelReply, now); err != nil {
		return p, err
	}
	p.Charge, err = recordCharge(p.Charge)
	return p, err
}

// recordCharge validates the charge of a record, if it has one.
func recordCharge(c *store.BudgetSettleParams) (*store.BudgetSettleParams, error) {
	if c == nil {
		return nil, nil
	}
	v, err := BudgetSettle(*c)
	return &v, err
}

// JournalPrimitives are the primitives whose calls are journaled.
var JournalPrimitives = []string{"fetch", "http", "ai", "aiJSON", "spawn"}

// JournalRecord validates p, its charge included, and fills its
// timestamp. What a script produced (its URL, result, error) is cleaned,
// not refused.
func JournalRecord(p store.JournalRecordParams, now time.Time) (store.JournalRecordParams, error) {
	e := &p.JournalEntry
	if e.RunID == "" || e.Turn < 1 || e.Index < 0 {
		return p, Invalidf("journal entry: run id, a turn from 1 and an index from 0 are required")
	}
	// An operation of an OpenAPI module is journaled by its name,
	// api:<module>.<operation>, and a tool of an MCP server by
	// mcp:<server>.<tool>.
	if !slices.Contains(JournalPrimitives, e.Primitive) && !((strings.HasPrefix(e.Primitive, "api:") || strings.HasPrefix(e.Primitive, "mcp:")) && len(e.Primitive) <= 200) {
		return p, Invalidf("journal entry of run %s turn %d: primitive %q is not journaled (journaled: %s, api:<module>.<operation>, mcp:<server>.<tool>)",
			e.RunID, e.Turn, e.Primitive, strings.Join(JournalPrimitives, ", "))
	}
	if e.Usage.PromptTokens < 0 || e.Usage.CompletionTokens < 0 {
		return p, Invalidf("journal entry of run %s turn %d: usage must not be negative", e.RunID, e.Turn)
	}
	if len(e.Result) > 0 {
		if err := CheckJSON("journal entry result", e.Result); err != nil {
			return p, err
		}
		e.Result = CleanJSON(e.Result)
	}
	e.Method, e.URL, e.Error = Clean(e.Method), Clean(e.URL), Clean(e.Error)
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	} else {
		e.CreatedAt = Time(e.CreatedAt)
	}
	var err error
	p.Charge, err = recordCharge(p.Charge)
	return p, err
}

// JournalListByRun validates p.
func JournalListByRun(p store.JournalListByRunParams) error {
	if p.RunID == "" {
		return Invalidf("journal list: run id is empty")
	}
	return nil
}

// ModelReply validates a reply to record and fills its timestamp.
func ModelReply(r store.ModelReply, now time.Time) (store.ModelReply, error) {
	if r.RunID == "" || r.Turn < 1 {
		return r, Invalidf("model reply: run id and a turn from 1 are required")
	}
	if r.Usage.PromptTokens < 0 || r.Usage.CompletionTokens < 0 {
		return r, Invalidf("model reply of run %s turn %d: usage must not be negative", r.RunID, r.Turn)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	} else {
		r.CreatedAt = Time(r.CreatedAt)
	}
	r.Content, r.Model = Clean(r.Content), Clean(r.Model)
	return r, nil
}
