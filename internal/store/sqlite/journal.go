package sqlite

import (
	"context"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// insertJournalSQL records an entry, fenced as insertReplySQL is.
var insertJournalSQL = `INSERT INTO journal (` + rules.JournalCols + `)
	SELECT id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11 FROM runs WHERE id = ?1 AND turn = ?2 - 1 AND status NOT IN (` + rules.TerminalSQL + `)
	ON CONFLICT (run_id, turn, idx) DO NOTHING RETURNING ` + rules.JournalCols

// JournalInsert records the entry with one fenced insert in the group
// commit and, with a Charge, settles in the same transaction.
func (d liteDriver) JournalInsert(ctx context.Context, p store.JournalRecordParams) (store.JournalRecordResult, bool, error) {
	e := p.JournalEntry
	var result any
	if len(e.Result) > 0 {
		result = string(e.Result)
	}
	c, err := record(ctx, d.s, p.Charge, insertJournalSQL, scans.JournalRow, e.RunID, e.Turn, e.Index, e.Primitive, e.Method, e.URL,
		result, e.Error, e.Usage.PromptTokens, e.Usage.CompletionTokens, e.CreatedAt.UnixMicro())
	if !c.inserted || err != nil {
		return store.JournalRecordResult{}, false, err
	}
	return store.JournalRecordResult{Entry: c.row, Settled: c.settled, ChargeErr: c.chargeErr}, true, nil
}

func (e exec) JournalGet(ctx context.Context, runID string, turn, index int) (agentfleet.JournalEntry, error) {
	return one(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = ? AND turn = ? AND idx = ?`, scans.JournalRow, runID, turn, index)
}

func (e exec) JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error) {
	if turn > 0 {
		return all(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = ? AND turn = ? ORDER BY idx`, scans.JournalRow, runID, turn)
	}
	return all(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = ? ORDER BY turn, idx`, scans.JournalRow, runID)
}
