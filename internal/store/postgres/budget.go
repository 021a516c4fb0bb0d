package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The budget ledger lives on the tenant row. Reserve and settle are each
// one statement, so the row lock is held only while Postgres executes it,
// never across a round trip; they apply rules.Ledger's arithmetic in SQL
// (the contract suite holds both backends to it).
//
// An unlimited tenant's row is never written per call, so its turns do not
// queue on the row lock: the reserve statement's UPDATE does not match it
// (the statement reads the row and writes nothing, so it commits without
// a WAL flush) and the reservation comes back with an empty id; settling
// that inserts the usage ledger row only, under a FOR KEY SHARE lock on
// the tenant row (the lock the ledger's foreign key takes anyway, which
// concurrent settles share). TenantUpdate locks the row FOR UPDATE before
// it sums the ledger for a tenant it gives a limit: that waits for every
// settle holding the share lock, so the sum sees them, and a settle that
// comes after finds the tenant limited (its lock waits, then re-reads
// the row) and charges the row instead.
//
// Window roll, shared by both: a window is due when none is open or Now
// has reached its end; rolling zeroes used, keeps reserved, and opens the
// window Now belongs to. Calendar bounds come from Go (rules.Window) as
// parameters; a duration window opens at Now for window_us.

// dueSQL is true when the tenant row t's window must roll at $now.
const dueSQL = `(t.window_end IS NULL OR t.window_end <= $3::timestamptz)`

// windowStartSQL and windowEndSQL are the bounds of the window a use at
// $3 (now) opens; $5/$6 are the day's bounds, $7/$8 the month's.
const (
	windowStartSQL = `CASE t.budget_window WHEN 'day' THEN $5::timestamptz WHEN 'month' THEN $7::timestamptz ELSE $3::timestamptz END`
	windowEndSQL   = `CASE t.budget_window WHEN 'day' THEN $6::timestamptz WHEN 'month' THEN $8::timestamptz
		ELSE $3::timestamptz + t.window_us * interval '1 microsecond' END`
)

// reserveSQL reserves $2 tokens for tenant $1 at $3 (minute $4) only if
// the tenant is limited and the window and per-minute limits allow, and
// records reservation $9 (run $10, lease until $11) in the same
// statement. The UPDATE's WHERE is re-checked against the latest row
// version after waiting for a concurrent writer, so no interleaving can
// overspend. The final SELECT reports the ledger as it was (whether the
// tenant is unlimited, or why it was refused).
//
// The statement commits asynchronously (synchronous_commit off for its
// transaction alone): it returns, and releases the tenant row, without
// waiting for its WAL flush. A limited tenant's reserves and charges all
// queue on its row, so this takes one of a turn's two flushes off that
// queue. What it risks is a reservation lost to a server crash within the
// WAL writer's delay: the limit holds regardless (charges are capped at
// it), the call's charge then finds no reservation, as after a lease
// expiry, and anything that depended on the reservation and committed
// synchronously (its charge) flushed it first, since WAL is sequential.
var reserveSQL = `WITH cfg AS (
		SELECT set_config('synchronous_commit', 'off', true)
	), u AS (
		UPDATE tenants t SET
			used = CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END,
			window_start = CASE WHEN ` + dueSQL + ` THEN ` + windowStartSQL + ` ELSE t.window_start END,
			window_end = CASE WHEN ` + dueSQL + ` THEN ` + windowEndSQL + ` ELSE t.window_end END,
			reserved = t.reserved + $2::bigint,
			minute_start = $4::timestamptz,
			minute_used = CASE WHEN t.minute_start = $4::timestamptz THEN t.minute_used ELSE 0 END + $2::bigint
		WHERE t.id = $1
			AND (t.token_limit > 0 OR t.tokens_per_minute > 0)
			AND (t.token_limit = 0
				OR CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END + t.reserved + $2::bigint <= t.token_limit)
			AND (t.tokens_per_minute = 0
				OR CASE WHEN t.minute_start = $4::timestamptz THEN t.minute_used ELSE 0 END + $2::bigint <= t.tokens_per_minute)
		RETURNING t.id
	), r AS (
		INSERT INTO reservations (id, tenant, run_id, tokens, lease_until, created_at)
		SELECT $9, u.id, $10, $2::bigint, $11, $3::timestamptz FROM u
	)
	SELECT EXISTS (SELECT 1 FROM u), ` + rules.LedgerCols + ` FROM tenants, cfg WHERE id = $1`

// Settling. The parameters (settleArgs) are: $1 the reservation id, or
// without one the tenant; $2 model, $3 now, $4 reported total, $5..$8 the
// calendar bounds (windowArgs), $9 prompt, $10 completion; without a
// reservation $11 the run. A ModelReplyRecord with a charge puts its own
// after them. Each form is a list of CTEs that settle only when gate (a
// SQL condition) holds, and ends in a CTE c holding the charge: one row,
// or none when there was nothing to charge (reservation gone, tenant
// unknown).

// settleReservedCTEs deletes reservation $1 and charges its tenant $4
// tokens (capped so used stays within the limit), logging the usage. The
// tenant row is locked (in o) before the charge is computed from it.
func settleReservedCTEs(gate string) string {
	return `r AS (
		DELETE FROM reservations WHERE id = $1 AND ` + gate + ` RETURNING tenant, run_id, tokens
	), o AS (
		SELECT t.id, t.token_limit, ` + dueSQL + ` AS due,
			CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END AS used0,
			` + windowStartSQL + ` AS ws, ` + windowEndSQL + ` AS we
		FROM tenants t JOIN r ON r.tenant = t.id
		FOR NO KEY UPDATE OF t
	), c AS (
		SELECT o.*, CASE WHEN o.token_limit = 0 THEN $4::bigint
			ELSE LEAST($4::bigint, GREATEST(o.token_limit - o.used0, 0)) END AS charged
		FROM o
	), u AS (
		UPDATE tenants t SET
			used = c.used0 + c.charged,
			reserved = GREATEST(t.reserved - r.tokens, 0),
			window_start = CASE WHEN c.due THEN c.ws ELSE t.window_start END,
			window_end = CASE WHEN c.due THEN c.we ELSE t.window_end END
		FROM c, r WHERE t.id = c.id
	), l AS (
		INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
		SELECT r.tenant, r.run_id, $2, $9, $10, c.charged, $4::bigint - c.charged, $3::timestamptz FROM r, c
	)`
}

// settleUnreservedCTEs charges tenant $1 (run $11) without a
// reservation. k matches a tenant that is unlimited, under a share lock:
// the ledger row is all that is written. Otherwise (given a limit since
// it reserved) o locks the row and the charge is applied as in
// settleReservedCTEs, with nothing reserved to drop. Exactly one of k and
// o has the tenant's row: o runs after k (it reads k) and, locking, sees
// the row as it is then.
//
// Only in the moment a tenant is given a limit can two of these deadlock:
// a k whose statement began before the change waits for it, then locks
// the new row version before rechecking it (and finding it limited), and
// o upgrades that lock. Postgres aborts one; one runs it again.
func settleUnreservedCTEs(gate string) string {
	return `k AS MATERIALIZED (
		SELECT t.id FROM tenants t WHERE t.id = $1 AND t.token_limit = 0 AND t.tokens_per_minute = 0 AND ` + gate + `
		FOR KEY SHARE
	), o AS (
		SELECT t.id, t.token_limit, ` + dueSQL + ` AS due,
			CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END AS used0,
			` + windowStartSQL + ` AS ws, ` + windowEndSQL + ` AS we
		FROM tenants t WHERE t.id = $1 AND ` + gate + ` AND NOT EXISTS (SELECT 1 FROM k)
		FOR NO KEY UPDATE
	), oc AS (
		SELECT o.*, CASE WHEN o.token_limit = 0 THEN $4::bigint
			ELSE LEAST($4::bigint, GREATEST(o.token_limit - o.used0, 0)) END AS charged
		FROM o
	), u AS (
		UPDATE tenants t SET
			used = oc.used0 + oc.charged,
			window_start = CASE WHEN oc.due THEN oc.ws ELSE t.window_start END,
			window_end = CASE WHEN oc.due THEN oc.we ELSE t.window_end END
		FROM oc WHERE t.id = oc.id
	), c AS (
		SELECT id, $4::bigint AS charged FROM k UNION ALL SELECT id, charged FROM oc
	), l AS (
		INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
		SELECT c.id, $11, $2, $9, $10, c.charged, $4::bigint - c.charged, $3::timestamptz FROM c
	)`
}

// settleCTEs is the settle form for p.
func settleCTEs(p store.BudgetSettleParams, gate string) string {
	if p.ReservationID == "" {
		return settleUnreservedCTEs(gate)
	}
	return settleReservedCTEs(gate)
}

var (
	settleReservedSQL   = `WITH ` + settleReservedCTEs("true") + ` SELECT charged FROM c`
	settleUnreservedSQL = `WITH ` + settleUnreservedCTEs("true") + ` SELECT charged FROM c`
)

// settleArgs are the parameters of p's settle form.
func settleArgs(p store.BudgetSettleParams) []any {
	ds, de, ms, me := windowArgs(p.Now)
	if p.ReservationID == "" {
		return []any{p.Tenant, p.Model, p.Now, p.Usage.Total(), ds, de, ms, me, p.Usage.PromptTokens, p.Usage.CompletionTokens, p.RunID}
	}
	return []any{p.ReservationID, p.Model, p.Now, p.Usage.Total(), ds, de, ms, me, p.Usage.PromptTokens, p.Usage.CompletionTokens}
}

// settleNotFound is the error of a settle that found nothing to charge.
func settleNotFound(p store.BudgetSettleParams) error {
	if p.ReservationID == "" {
		return fmt.Errorf("tenant %s: %w", p.Tenant, store.ErrNotFound)
	}
	return fmt.Errorf("reservation %s (settled, released or expired): %w", p.ReservationID, store.ErrNotFound)
}

// windowArgs are the calendar bounds at now, for windowStartSQL and
// windowEndSQL.
func windowArgs(now time.Time) (dayStart, dayEnd, monthStart, monthEnd time.Time) {
	dayStart, dayEnd = rules.Window{Kind: agentfleet.WindowDay}.Bounds(now)
	monthStart, monthEnd = rules.Window{Kind: agentfleet.WindowMonth}.Bounds(now)
	return
}

// LedgerReserve is one statement, reserveSQL.
func (d pgDriver) LedgerReserve(ctx context.Context, r agentfleet.Reservation, now time.Time) (bool, driver.Ledger, error) {
	ds, de, ms, me := windowArgs(now)
	var reserved bool
	l, err := one(ctx, d.exec, reserveSQL, func(sc scanner) (driver.Ledger, error) { return scans.Ledger(sc, &reserved) },
		r.Tenant, r.Tokens, now, rules.MinuteOf(now), ds, de, ms, me, r.ID, r.RunID, r.LeaseUntil)
	return reserved, l, err
}

// LedgerSettle is one statement: settleReservedSQL or settleUnreservedSQL.
func (d pgDriver) LedgerSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	q := settleReservedSQL
	if p.ReservationID == "" {
		q = settleUnreservedSQL
	}
	charged, err := one(ctx, d.exec, q, rules.ScanInt64, settleArgs(p)...)
	if isNotFound(err) {
		err = settleNotFound(p)
	}
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	return store.BudgetSettleResult{Charged: charged, Overage: p.Usage.Total() - charged}, nil
}

func (e exec) ReservationRelease(ctx context.Context, id string) error {
	_, err := one(ctx, e, `WITH r AS (
			DELETE FROM reservations WHERE id = $1 RETURNING tenant, tokens
		)
		UPDATE tenants t SET reserved = GREATEST(t.reserved - r.tokens, 0) FROM r WHERE t.id = r.tenant RETURNING t.id`,
		rules.ScanString, id)
	return err
}

// ReservationExpire serialises concurrent expiries by an advisory lock:
// each updates several tenant rows, and two doing so in different orders
// could deadlock.
func (e exec) ReservationExpire(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, lockExpire); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH d AS (
				DELETE FROM reservations WHERE lease_until < $1 RETURNING tenant, tokens
			), held AS (
				SELECT tenant, sum(tokens) AS tokens FROM d GROUP BY tenant
			), u AS (
				UPDATE tenants t SET reserved = GREATEST(t.reserved - held.tokens, 0) FROM held WHERE t.id = held.tenant
			)
			SELECT count(*) FROM d`, now).Scan(&n)
	})
	return n, err
}

func (e exec) UsageList(ctx context.Context, p store.UsageListParams) ([]store.UsageRow, error) {
	key := "model"
	if p.GroupBy == "run" {
		key = "run_id"
	}
	return all(ctx, e, `SELECT `+key+`, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, count(*) FROM usage_ledger
		WHERE tenant = $1 AND ($2 = '' OR run_id = $2) AND ($3::timestamptz IS NULL OR created_at >= $3)
		GROUP BY `+key+` ORDER BY `+key+` COLLATE "C"`, rules.ScanUsageRow, p.Tenant, p.RunID, tsArg(p.Since))
}

func (e exec) LedgerGet(ctx context.Context, tenant string) (driver.Ledger, error) {
	return one(ctx, e, `SELECT `+rules.LedgerCols+` FROM tenants WHERE id = $1`, scans.LedgerRow, tenant)
}

// LedgerLock locks the row FOR UPDATE: that waits out every settle still
// inserting into the usage ledger under its share lock.
func (e exec) LedgerLock(ctx context.Context, tenant string) (agentfleet.Tenant, driver.Ledger, error) {
	var l driver.Ledger
	t, err := one(ctx, e, `SELECT `+rules.TenantCols+`, `+rules.LedgerCols+` FROM tenants WHERE id = $1 FOR UPDATE`,
		func(sc scanner) (agentfleet.Tenant, error) { return scans.Tenant(sc, scans.LedgerDest(&l)...) }, tenant)
	return t, l, err
}

func (e exec) UsageFirst(ctx context.Context, tenant string, t time.Time) (time.Time, bool, error) {
	next, err := one(ctx, e, `SELECT min(created_at) FROM usage_ledger WHERE tenant = $1 AND created_at >= COALESCE($2::timestamptz, '-infinity')`,
		scans.Timestamp, tenant, tsArg(t))
	return next, !next.IsZero(), err
}

func (e exec) UsageSum(ctx context.Context, tenant string, from, to time.Time) (int64, error) {
	return one(ctx, e, `SELECT COALESCE(sum(charged), 0)::bigint FROM usage_ledger WHERE tenant = $1 AND created_at >= $2 AND created_at < $3`,
		rules.ScanInt64, tenant, from, to)
}

func (e exec) TenantUpdate(ctx context.Context, t agentfleet.Tenant, windowEvery *time.Duration, l driver.Ledger, now time.Time) (agentfleet.Tenant, error) {
	var windowUS *int64
	if windowEvery != nil {
		us := windowEvery.Microseconds()
		windowUS = &us
	}
	return one(ctx, e, `UPDATE tenants SET token_limit = $2, budget_window = $3, window_us = COALESCE($4::bigint, window_us),
			tokens_per_minute = $5, max_concurrent_runs = $6, weight = $7, exhausted = $8, max_queued_runs = $9, updated_at = $10,
			used = $11, window_start = $12, window_end = $13, minute_start = $14, minute_used = $15
		WHERE id = $1 RETURNING `+rules.TenantCols, scans.TenantRow,
		t.ID, t.TokenLimit, string(t.Window), windowUS, t.TokensPerMinute, t.MaxConcurrentRuns, t.Weight, string(t.Exhausted), t.MaxQueuedRuns, now,
		l.Used, tsArg(l.WindowStart), tsArg(l.WindowEnd), tsArg(l.MinuteStart), l.MinuteUsed)
}
