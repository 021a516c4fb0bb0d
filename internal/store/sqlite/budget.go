package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The budget ledger lives on the tenant row. Every change to it happens
// inside a write transaction, which in this backend holds the database's
// only write lock: read, decide with rules.Ledger, write back is atomic
// under any concurrency.

const ledgerCols = `id, token_limit, budget_window, used, reserved, window_start, window_end, tokens_per_minute, minute_start, minute_used`

func loadLedger(ctx context.Context, q queryer, tenant string) (rules.Ledger, error) {
	var l rules.Ledger
	var window string
	var ws, we, ms sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT `+ledgerCols+` FROM tenants WHERE id = ?`, tenant).
		Scan(&l.Tenant, &l.Limit, &window, &l.Used, &l.Reserved, &ws, &we, &l.TokensPerMinute, &ms, &l.MinuteUsed)
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("tenant %s: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return l, err
	}
	l.WindowStart, l.WindowEnd, l.MinuteStart = tsVal(ws), tsVal(we), tsVal(ms)
	l.Window, err = rules.ParseWindow(agentfleet.BudgetWindow(window))
	return l, err
}

func saveLedger(ctx context.Context, tx *wtx, l rules.Ledger) error {
	_, err := tx.ExecContext(ctx, `UPDATE tenants SET used = ?, reserved = ?, window_start = ?, window_end = ?, minute_start = ?, minute_used = ?
		WHERE id = ?`, l.Used, l.Reserved, tsArg(l.WindowStart), tsArg(l.WindowEnd), tsArg(l.MinuteStart), l.MinuteUsed, l.Tenant)
	return err
}

func (s *Store) BudgetReserve(ctx context.Context, p store.BudgetReserveParams) (agentfleet.Reservation, error) {
	p, err := rules.BudgetReserve(p)
	if err != nil {
		return agentfleet.Reservation{}, err
	}
	r := agentfleet.Reservation{ID: rules.NewID(), Tenant: p.Tenant, RunID: p.RunID, Tokens: p.Tokens, LeaseUntil: p.Now.Add(p.Lease)}
	err = s.write(ctx, func(tx *wtx) error {
		l, err := loadLedger(ctx, tx, p.Tenant)
		if err != nil {
			return err
		}
		if l, err = l.Reserve(p.Tokens, p.Now); err != nil {
			return err
		}
		if err := saveLedger(ctx, tx, l); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO reservations (id, tenant, run_id, tokens, lease_until, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.ID, r.Tenant, r.RunID, r.Tokens, r.LeaseUntil.UnixMicro(), p.Now.UnixMicro())
		return err
	})
	if err != nil {
		return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for %s: %w", p.Tokens, p.Tenant, err)
	}
	return r, nil
}

// takeReservation deletes a reservation and returns what it held.
func takeReservation(ctx context.Context, tx *wtx, id string) (tenant, runID string, tokens int64, err error) {
	err = tx.QueryRowContext(ctx, `DELETE FROM reservations WHERE id = ? RETURNING tenant, run_id, tokens`, id).Scan(&tenant, &runID, &tokens)
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("reservation %s (settled, released or expired): %w", id, store.ErrNotFound)
	}
	return tenant, runID, tokens, err
}

func (s *Store) BudgetSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	p, err := rules.BudgetSettle(p)
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	var res store.BudgetSettleResult
	err = s.write(ctx, func(tx *wtx) error {
		tenant, runID, tokens, err := takeReservation(ctx, tx, p.ReservationID)
		if err != nil {
			return err
		}
		l, err := loadLedger(ctx, tx, tenant)
		if err != nil {
			return err
		}
		l, res.Charged, res.Overage = l.Settle(tokens, p.Usage.Total(), p.Now)
		if err := saveLedger(ctx, tx, l); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, tenant, runID, p.Model, p.Usage.PromptTokens, p.Usage.CompletionTokens, res.Charged, res.Overage, p.Now.UnixMicro())
		return err
	})
	if err != nil {
		return store.BudgetSettleResult{}, fmt.Errorf("settle reservation %s: %w", p.ReservationID, err)
	}
	return res, nil
}

func (s *Store) BudgetRelease(ctx context.Context, reservationID string) error {
	err := s.write(ctx, func(tx *wtx) error {
		tenant, _, tokens, err := takeReservation(ctx, tx, reservationID)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE tenants SET reserved = max(reserved - ?, 0) WHERE id = ?`, tokens, tenant)
		return err
	})
	if err != nil {
		return fmt.Errorf("release reservation %s: %w", reservationID, err)
	}
	return nil
}

func (s *Store) BudgetExpire(ctx context.Context, now time.Time) (int, error) {
	now = rules.NowOr(now)
	released := 0
	err := s.write(ctx, func(tx *wtx) error {
		rows, err := tx.QueryContext(ctx, `DELETE FROM reservations WHERE lease_until < ? RETURNING tenant, tokens`, now.UnixMicro())
		if err != nil {
			return err
		}
		held := map[string]int64{}
		n := 0
		for rows.Next() {
			var tenant string
			var tokens int64
			if err := rows.Scan(&tenant, &tokens); err != nil {
				rows.Close()
				return err
			}
			held[tenant] += tokens
			n++
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for tenant, tokens := range held {
			if _, err := tx.ExecContext(ctx, `UPDATE tenants SET reserved = max(reserved - ?, 0) WHERE id = ?`, tokens, tenant); err != nil {
				return err
			}
		}
		released = n
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire reservations before %s: %w", now.Format(time.RFC3339), err)
	}
	return released, nil
}

func (s *Store) BudgetGet(ctx context.Context, tenant string, now time.Time) (agentfleet.BudgetState, error) {
	l, err := loadLedger(ctx, s.r, tenant)
	if err != nil {
		return agentfleet.BudgetState{}, fmt.Errorf("get budget of %s: %w", tenant, err)
	}
	return l.State(rules.NowOr(now)), nil
}

func (s *Store) UsageList(ctx context.Context, p store.UsageListParams) ([]store.UsageRow, error) {
	p, err := rules.UsageList(p)
	if err != nil {
		return nil, err
	}
	key := "model"
	if p.GroupBy == "run" {
		key = "run_id"
	}
	rows, err := s.rd.QueryContext(ctx, `SELECT `+key+`, sum(prompt_tokens), sum(completion_tokens), count(*) FROM usage_ledger
		WHERE tenant = ? AND (? = '' OR run_id = ?) AND created_at >= ? GROUP BY `+key+` ORDER BY `+key,
		p.Tenant, p.RunID, p.RunID, p.Since.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("list usage of %s: %w", p.Tenant, err)
	}
	return collect(rows, func(sc interface{ Scan(...any) error }) (store.UsageRow, error) {
		var u store.UsageRow
		err := sc.Scan(&u.Key, &u.Usage.PromptTokens, &u.Usage.CompletionTokens, &u.Calls)
		return u, err
	})
}
