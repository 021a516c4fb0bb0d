package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// journalStatements record an entry of 11 parameters (in rules.JournalCols'
// order), fenced as a reply is.
var journalStatements = recordStatementsOf(fencedInsertCTE("journal", rules.JournalCols, "run_id, turn, idx", 11), rules.JournalCols)

// JournalInsert is one statement through the shared pipeline, so the
// records of concurrent turns share a round trip and a commit. An entry
// not inserted (there already, or a lost fence) is sorted out by the
// rules after, and charges nothing.
func (d pgDriver) JournalInsert(ctx context.Context, p store.JournalRecordParams) (store.JournalRecordResult, bool, error) {
	e := p.JournalEntry
	q, args, order := journalStatements.pick(p.Charge, e.RunID)
	var result *string
	if len(e.Result) > 0 {
		r := string(e.Result)
		result = &r
	}
	args = append(args, e.RunID, e.Turn, e.Index, e.Primitive, e.Method, e.URL, result, e.Error,
		e.Usage.PromptTokens, e.Usage.CompletionTokens, e.CreatedAt)
	var (
		got      agentfleet.JournalEntry
		charged  *int64
		inserted bool
	)
	err := d.s.pipelined(ctx, order, func(b *pgx.Batch) { b.Queue(q, args...) }, func(br pgx.BatchResults) error {
		var err error
		got, err = scans.Journal(br.QueryRow(), &charged)
		inserted = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || !inserted {
		return store.JournalRecordResult{}, false, err
	}
	res := store.JournalRecordResult{Entry: got}
	res.Settled, res.ChargeErr = recordCharged(p.Charge, charged)
	return res, true, nil
}

func (e exec) JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error) {
	scan := scans.JournalRow
	if turn > 0 {
		return all(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = $1 AND turn = $2 ORDER BY idx`, scan, runID, turn)
	}
	return all(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = $1 ORDER BY turn, idx`, scan, runID)
}

func (e exec) JournalGet(ctx context.Context, runID string, turn, index int) (agentfleet.JournalEntry, error) {
	return one(ctx, e, `SELECT `+rules.JournalCols+` FROM journal WHERE run_id = $1 AND turn = $2 AND idx = $3`,
		scans.JournalRow, runID, turn, index)
}
