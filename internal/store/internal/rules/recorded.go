package rules

import (
	"context"
	"errors"

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

func notFoundIsNil(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
