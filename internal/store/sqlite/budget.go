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
// An unlimited tenant's row is not written per call: LedgerReserve learns
// it is unlimited with one read on the read pool (the single writer is not
// involved at all), so its reservation has an empty id; settling
// that appends the usage ledger row and nothing else; BudgetGet sums the
// ledger. Since every write goes through the one writer, "is the tenant
// still unlimited?" is decided inside the settle's write transaction, and
// TenantUpdate's ledger sum sees every settlement before it: a tenant
// given a limit starts from exactly what the ledger charged.

func loadLedger(ctx context.Context, q queryer, tenant string) (rules.Ledger, error) {
	r, err := one(ctx, exec{q: q}, `SELECT `+rules.LedgerCols+` FROM tenants WHERE id = ?`, scans.LedgerRow, tenant)
	if err != nil {
		return rules.Ledger{}, err
	}
	return rules.LedgerFrom(r)
}

func saveLedger(ctx context.Context, tx *wtx, l rules.Ledger) error {
	_, err := tx.ExecContext(ctx, `UPDATE tenants SET used = ?, reserved = ?, window_start = ?, window_end = ?, minute_start = ?, minute_used = ?
		WHERE id = ?`, l.Used, l.Reserved, tsArg(l.WindowStart), tsArg(l.WindowEnd), tsArg(l.MinuteStart), l.MinuteUsed, l.Tenant)
	return err
}

// LedgerReserve reads the ledger on the read pool first: an unlimited
// tenant's reserve (the common case) never reaches the single writer.
// Else it reads again, decides and writes in one write of the group
// commit.
func (d liteDriver) LedgerReserve(ctx context.Context, r agentfleet.Reservation, now time.Time) (bool, driver.Ledger, error) {
	l, err := loadLedger(ctx, d.s.rd, r.Tenant)
	if err != nil || l.Unlimited() {
		return false, l.Row(), err
	}
	reserved := false
	err = d.s.write(ctx, func(tx *wtx) error {
		var err error
		if l, err = loadLedger(ctx, tx, r.Tenant); err != nil || l.Unlimited() {
			return err
		}
		held, refused := l.Reserve(r.Tokens, now)
		if refused != nil {
			return nil // the rules say why, from l
		}
		if err := saveLedger(ctx, tx, held); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO reservations (id, tenant, run_id, tokens, lease_until, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.ID, r.Tenant, r.RunID, r.Tokens, r.LeaseUntil.UnixMicro(), now.UnixMicro())
		reserved = err == nil
		return err
	})
	return reserved, l.Row(), mapErr(err)
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

// ReservationExpire gives the tokens back, then deletes, in one write.
func (e exec) ReservationExpire(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := e.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `UPDATE tenants SET reserved = max(reserved - (
				SELECT sum(tokens) FROM reservations r WHERE r.tenant = tenants.id AND r.lease_until < ?1), 0)
			WHERE id IN (SELECT tenant FROM reservations WHERE lease_until < ?1)`, now.UnixMicro())
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM reservations WHERE lease_until < ?`, now.UnixMicro())
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return int(n), err
}

func (e exec) UsageFirst(ctx context.Context, tenant string, t time.Time) (time.Time, bool, error) {
	first, err := one(ctx, e, `SELECT min(created_at) FROM usage_ledger WHERE tenant = ? AND created_at >= ?`,
		scans.Timestamp, tenant, t.UnixMicro())
	return first, !first.IsZero(), err
}

func (e exec) UsageSum(ctx context.Context, tenant string, from, to time.Time) (int64, error) {
	return one(ctx, e, `SELECT coalesce(sum(charged), 0) FROM usage_ledger WHERE tenant = ? AND created_at >= ? AND created_at < ?`,
		rules.ScanInt64, tenant, from.UnixMicro(), to.UnixMicro())
}

func (e exec) LedgerGet(ctx context.Context, tenant string) (driver.Ledger, error) {
	l, err := loadLedger(ctx, e.q, tenant)
	return l.Row(), err
}

// LedgerLock reads in the write transaction, which holds what it reads.
func (e exec) LedgerLock(ctx context.Context, tenant string) (agentfleet.Tenant, driver.Ledger, error) {
	t, err := one(ctx, e, `SELECT `+rules.TenantCols+` FROM tenants WHERE id = ?`, scans.TenantRow, tenant)
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
		WHERE id = ? RETURNING `+rules.TenantCols, scans.TenantRow,
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
		rules.ScanUsageRow, p.Tenant, p.RunID, p.RunID, p.Since.UnixMicro())
}
