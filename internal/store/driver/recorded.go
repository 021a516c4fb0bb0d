package driver

import (
	"context"

	"github.com/agentfleet/agentfleet/internal/store"
)

// Recorder holds the coarse primitives of a turn's records, each one
// fenced insert that, only when it inserted, settles the record's charge
// in the same transaction: on PostgreSQL one statement through the shared
// pipeline (see store/postgres/run.go), on SQLite one write of the group
// commit. The fence: the run has committed exactly turn-1 turns and has
// not ended; a record is kept once per turn (per index for the journal).
// inserted false means nothing was written and nothing charged, and the
// rules find out why (rules.ReplyExisting, rules.JournalExisting). A
// charge whose reservation is gone is the result's ChargeErr and keeps
// the record.
type Recorder interface {
	ModelReplyInsert(ctx context.Context, p store.ModelReplyRecordParams) (res store.ModelReplyRecordResult, inserted bool, err error)
	JournalInsert(ctx context.Context, p store.JournalRecordParams) (res store.JournalRecordResult, inserted bool, err error)
}
