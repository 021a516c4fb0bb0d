package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The budget ledger lives on the tenant row. Every change to it happens
// inside a write transaction, which in this backend holds the database's
// only write lock: read, decide with rules.Ledger, write back is atomic
// under any concurrency.
//
// An unlimited tenant's row is not written per call: BudgetReserve learns
// it is unlimited with one read on the read pool (the single writer is not
// involved at all) and returns a reservation with an empty id; settling
// that appends the usage ledger row and nothing else; BudgetGet sums the
// ledger. Since every write goes through the one writer, "is the tenant
// still unlimited?" is decided inside the settle's write transaction, and
// TenantUpdate's ledger sum sees every settlement before it: a tenant
// given a limit starts from exactly what the ledger charged.

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

// unlimitedSQL reads whether a tenant is unlimited.
const unlimitedSQL = `SELECT token_limit = 0 AND tokens_per_minute = 0 FROM tenants WHERE id = ?`

func (s *Store) BudgetReserve(ctx context.Context, p store.BudgetReserveParams) (agentfleet.Reservation, error) {
	p, err := rules.BudgetReserve(p)
	if err != nil {
		return agentfleet.Reservation{}, err
	}
	r := agentfleet.Reservation{Tenant: p.Tenant, RunID: p.RunID, Tokens: p.Tokens, LeaseUntil: p.Now.Add(p.Lease)}
	var unlimited bool
	if err := s.rd.QueryRowContext(ctx, unlimitedSQL, p.Tenant).Scan(&unlimited); err != nil {
		err = mapErr(err)
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("tenant %s: %w", p.Tenant, err)
		}
		return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for %s: %w", p.Tokens, p.Tenant, err)
	}
	if unlimited {
		return r, nil // nothing to hold: see BudgetSettle
	}
	r.ID = rules.NewID()
	err = s.write(ctx, func(tx *wtx) error {
		l, err := loadLedger(ctx, tx, p.Tenant)
		if err != nil {
			return err
		}
		if l.Unlimited() {
			// Made unlimited since the read: nothing to hold after all.
			r.ID = ""
			return nil
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

// LedgerSettle settles as its own write of the group commit.
func (d liteDriver) LedgerSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	var res store.BudgetSettleResult
	err := d.s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = settle(ctx, tx, p)
		return err
	})
	return res, err
}

// settleUnlimitedSQL appends the ledger row of an unlimited tenant's
// usage, charged in full; it inserts nothing when the tenant is limited
// or does not exist.
const settleUnlimitedSQL = `INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
	SELECT id, ?, ?, ?, ?, ?, 0, ? FROM tenants WHERE id = ? AND token_limit = 0 AND tokens_per_minute = 0`

const insertUsageSQL = `INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// settle applies a (validated) settle inside tx. It returns ErrNotFound,
// having written nothing, when the reservation is gone or, without one,
// the tenant does not exist.
func settle(ctx context.Context, tx *wtx, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	total := p.Usage.Total()
	tenant, runID, reserved := p.Tenant, p.RunID, int64(0)
	if p.ReservationID != "" {
		var err error
		if tenant, runID, reserved, err = takeReservation(ctx, tx, p.ReservationID); err != nil {
			return store.BudgetSettleResult{}, err
		}
	} else {
		// The common case, an unlimited tenant: one statement, and the
		// tenant row is not written.
		res, err := tx.ExecContext(ctx, settleUnlimitedSQL, runID, p.Model, p.Usage.PromptTokens, p.Usage.CompletionTokens,
			total, p.Now.UnixMicro(), tenant)
		if err != nil {
			return store.BudgetSettleResult{}, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return store.BudgetSettleResult{Charged: total}, err
		}
		// Given a limit since it reserved (or gone): charge the row,
		// with no reservation to drop.
	}
	l, err := loadLedger(ctx, tx, tenant)
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	var res store.BudgetSettleResult
	l, res.Charged, res.Overage = l.Settle(reserved, total, p.Now)
	if err := saveLedger(ctx, tx, l); err != nil {
		return store.BudgetSettleResult{}, err
	}
	_, err = tx.ExecContext(ctx, insertUsageSQL, tenant, runID, p.Model, p.Usage.PromptTokens, p.Usage.CompletionTokens,
		res.Charged, res.Overage, p.Now.UnixMicro())
	return res, err
}

func (e exec) ReservationRelease(ctx context.Context, id string) error {
	return e.write(ctx, func(tx *wtx) error {
		tenant, _, tokens, err := takeReservation(ctx, tx, id)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE tenants SET reserved = max(reserved - ?, 0) WHERE id = ?`, tokens, tenant)
		return err
	})
}

func (e exec) ReservationExpire(ctx context.Context, now time.Time) (int, error) {
	released := 0
	err := e.write(ctx, func(tx *wtx) error {
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
	return released, err
}

func (e exec) UsageFirst(ctx context.Context, tenant string, t time.Time) (time.Time, bool, error) {
	us, err := one(ctx, e, `SELECT min(created_at) FROM usage_ledger WHERE tenant = ? AND created_at >= ?`,
		func(sc interface{ Scan(...any) error }) (sql.NullInt64, error) {
			var us sql.NullInt64
			return us, sc.Scan(&us)
		}, tenant, t.UnixMicro())
	return tsVal(us), us.Valid, err
}

func (e exec) UsageSum(ctx context.Context, tenant string, from, to time.Time) (int64, error) {
	return one(ctx, e, `SELECT coalesce(sum(charged), 0) FROM usage_ledger WHERE tenant = ? AND created_at >= ? AND created_at < ?`,
		func(sc interface{ Scan(...any) error }) (int64, error) {
			var n int64
			return n, sc.Scan(&n)
		}, tenant, from.UnixMicro(), to.UnixMicro())
}

func (e exec) LedgerGet(ctx context.Context, tenant string) (driver.Ledger, error) {
	l, err := loadLedger(ctx, e.q, tenant)
	return l.Row(), mapErr(err)
}

// LedgerLock reads in the write transaction, which holds what it reads.
func (e exec) LedgerLock(ctx context.Context, tenant string) (agentfleet.Tenant, driver.Ledger, error) {
	t, err := one(ctx, e, `SELECT `+tenantCols+` FROM tenants WHERE id = ?`, scanTenant, tenant)
	if err != nil {
		return t, driver.Ledger{}, err
	}
	l, err := e.LedgerGet(ctx, tenant)
	return t, l, err
}

func (e exec) TenantUpdate(ctx context.Context, t agentfleet.Tenant, _ *time.Duration, l driver.Ledger, now time.Time) (agentfleet.Tenant, error) {
	return row(ctx, e, `UPDATE tenants SET token_limit = ?, budget_window = ?, tokens_per_minute = ?,
			max_concurrent_runs = ?, max_queued_runs = ?, weight = ?, exhausted = ?, updated_at = ?,
			used = ?, window_start = ?, window_end = ?, minute_start = ?, minute_used = ?
		WHERE id = ? RETURNING `+tenantCols, scanTenant,
		t.TokenLimit, string(t.Window), t.TokensPerMinute, t.MaxConcurrentRuns, t.MaxQueuedRuns, t.Weight, string(t.Exhausted), now.UnixMicro(),
		l.Used, tsArg(l.WindowStart), tsArg(l.WindowEnd), tsArg(l.MinuteStart), l.MinuteUsed, t.ID)
}

func (e exec) UsageList(ctx context.Context, p store.UsageListParams) ([]store.UsageRow, error) {
	key := "model"
	if p.GroupBy == "run" {
		key = "run_id"
	}
	return all(ctx, e, `SELECT `+key+`, sum(prompt_tokens), sum(completion_tokens), count(*) FROM usage_ledger
		WHERE tenant = ? AND (? = '' OR run_id = ?) AND created_at >= ? GROUP BY `+key+` ORDER BY `+key,
		func(sc interface{ Scan(...any) error }) (store.UsageRow, error) {
			var u store.UsageRow
			err := sc.Scan(&u.Key, &u.Usage.PromptTokens, &u.Usage.CompletionTokens, &u.Calls)
			return u, err
		}, p.Tenant, p.RunID, p.RunID, p.Since.UnixMicro())
}
