package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

const journalCols = `run_id, turn, idx, primitive, method, url, result, error, prompt_tokens, completion_tokens, created_at`

// insertJournalSQL records an entry, fenced as insertReplySQL is.
var insertJournalSQL = `INSERT INTO journal (` + journalCols + `)
	SELECT id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11 FROM runs WHERE id = ?1 AND turn = ?2 - 1 AND status NOT IN (` + terminalList + `)
	ON CONFLICT (run_id, turn, idx) DO NOTHING RETURNING ` + journalCols

func scanJournal(sc interface{ Scan(...any) error }) (agentfleet.JournalEntry, error) {
	var e agentfleet.JournalEntry
	var result sql.NullString
	var created int64
	err := sc.Scan(&e.RunID, &e.Turn, &e.Index, &e.Primitive, &e.Method, &e.URL, &result, &e.Error,
		&e.Usage.PromptTokens, &e.Usage.CompletionTokens, &created)
	if result.Valid {
		e.Result = []byte(result.String)
	}
	e.CreatedAt = fromMicros(created)
	return e, err
}

// JournalInsert records the entry with one fenced insert in the group
// commit and, with a Charge, settles in the same transaction.
func (d liteDriver) JournalInsert(ctx context.Context, p store.JournalRecordParams) (store.JournalRecordResult, bool, error) {
	e := p.JournalEntry
	var result any
	if len(e.Result) > 0 {
		result = string(e.Result)
	}
	var res store.JournalRecordResult
	inserted := false
	err := d.s.write(ctx, func(tx *wtx) error {
		res, inserted = store.JournalRecordResult{}, false
		got, err := scanJournal(tx.QueryRowContext(ctx, insertJournalSQL, e.RunID, e.Turn, e.Index, e.Primitive, e.Method, e.URL,
			result, e.Error, e.Usage.PromptTokens, e.Usage.CompletionTokens, e.CreatedAt.UnixMicro()))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Entry, inserted = got, true
		res.Settled, res.ChargeErr, err = chargeRecorded(ctx, tx, p.Charge)
		return err
	})
	return res, inserted, err
}

func (e exec) JournalGet(ctx context.Context, runID string, turn, index int) (agentfleet.JournalEntry, error) {
	return one(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = ? AND turn = ? AND idx = ?`, scanJournal, runID, turn, index)
}

func (e exec) JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error) {
	if turn > 0 {
		return all(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = ? AND turn = ? ORDER BY idx`, scanJournal, runID, turn)
	}
	return all(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = ? ORDER BY turn, idx`, scanJournal, runID)
}
