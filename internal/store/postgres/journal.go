package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

const journalCols = `run_id, turn, idx, primitive, method, url, result, error, prompt_tokens, completion_tokens, created_at`

// scanJournal scans journalCols, then any extra trailing columns.
func scanJournal(sc scanner, extra ...any) (agentfleet.JournalEntry, error) {
	var e agentfleet.JournalEntry
	var result *string
	dest := append([]any{&e.RunID, &e.Turn, &e.Index, &e.Primitive, &e.Method, &e.URL, &result, &e.Error,
		&e.Usage.PromptTokens, &e.Usage.CompletionTokens, &e.CreatedAt}, extra...)
	err := sc.Scan(dest...)
	if result != nil {
		e.Result = []byte(*result)
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return e, err
}

// insertJournalCTE inserts the entry of 11 parameters from $first (in
// journalCols' order), fenced as insertReplyCTE is.
func insertJournalCTE(first int) string {
	ps := make([]string, 11)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(first+i)
	}
	return `m AS (
		INSERT INTO journal (` + journalCols + `)
		SELECT id, ` + strings.Join(ps[1:], ", ") + ` FROM runs
		WHERE id = ` + ps[0] + ` AND turn = ` + ps[1] + ` - 1 AND status NOT IN (` + terminalList + `)
		ON CONFLICT (run_id, turn, idx) DO NOTHING RETURNING ` + journalCols + `
	)`
}

var (
	journalSQL                 = `WITH ` + insertJournalCTE(1) + ` SELECT ` + journalCols + `, NULL::bigint FROM m`
	journalChargeReservedSQL   = recordChargeSQL(store.BudgetSettleParams{ReservationID: "x"}, insertJournalCTE, journalCols)
	journalChargeUnreservedSQL = recordChargeSQL(store.BudgetSettleParams{}, insertJournalCTE, journalCols)
)

// JournalInsert is one statement through the shared pipeline, so the
// records of concurrent turns share a round trip and a commit. An entry
// not inserted (there already, or a lost fence) is sorted out by the
// rules after, and charges nothing.
func (d pgDriver) JournalInsert(ctx context.Context, p store.JournalRecordParams) (store.JournalRecordResult, bool, error) {
	e := p.JournalEntry
	q, args := journalSQL, []any(nil)
	if p.Charge != nil {
		q = journalChargeReservedSQL
		if p.Charge.ReservationID == "" {
			q = journalChargeUnreservedSQL
		}
		args = settleArgs(*p.Charge)
	}
	var result *string
	if len(e.Result) > 0 {
		r := string(e.Result)
		result = &r
	}
	args = append(args, e.RunID, e.Turn, e.Index, e.Primitive, e.Method, e.URL, result, e.Error,
		e.Usage.PromptTokens, e.Usage.CompletionTokens, e.CreatedAt)
	order := pipeOrderRun + e.RunID
	if p.Charge != nil {
		order = pipeOrderTenant + p.Charge.Tenant
	}
	var (
		got      agentfleet.JournalEntry
		charged  *int64
		inserted bool
	)
	err := d.s.pipelined(ctx, order, func(b *pgx.Batch) { b.Queue(q, args...) }, func(br pgx.BatchResults) error {
		var err error
		got, err = scanJournal(br.QueryRow(), &charged)
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
	scan := func(sc scanner) (agentfleet.JournalEntry, error) { return scanJournal(sc) }
	if turn > 0 {
		return all(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = $1 AND turn = $2 ORDER BY idx`, scan, runID, turn)
	}
	return all(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = $1 ORDER BY turn, idx`, scan, runID)
}

func (e exec) JournalGet(ctx context.Context, runID string, turn, index int) (agentfleet.JournalEntry, error) {
	return one(ctx, e, `SELECT `+journalCols+` FROM journal WHERE run_id = $1 AND turn = $2 AND idx = $3`,
		func(sc scanner) (agentfleet.JournalEntry, error) { return scanJournal(sc) }, runID, turn, index)
}
