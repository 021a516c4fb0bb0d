package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The budget ledger lives on the tenant row. Reserve and settle are each
// one statement, so the row lock is held only while Postgres executes it,
// never across a round trip; they apply rules.Ledger's arithmetic in SQL
// (the contract suite holds both backends to it).
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
// the window and per-minute limits allow, and records reservation $9
// (run $10, lease until $11) in the same statement. The UPDATE's WHERE is
// re-checked against the latest row version after waiting for a
// concurrent writer, so no interleaving can overspend. The final SELECT
// reports the ledger as it was (for a refusal's message).
var reserveSQL = `WITH u AS (
		UPDATE tenants t SET
			used = CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END,
			window_start = CASE WHEN ` + dueSQL + ` THEN ` + windowStartSQL + ` ELSE t.window_start END,
			window_end = CASE WHEN ` + dueSQL + ` THEN ` + windowEndSQL + ` ELSE t.window_end END,
			reserved = t.reserved + $2::bigint,
			minute_start = $4::timestamptz,
			minute_used = CASE WHEN t.minute_start = $4::timestamptz THEN t.minute_used ELSE 0 END + $2::bigint
		WHERE t.id = $1
			AND (t.token_limit = 0
				OR CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END + t.reserved + $2::bigint <= t.token_limit)
			AND (t.tokens_per_minute = 0
				OR CASE WHEN t.minute_start = $4::timestamptz THEN t.minute_used ELSE 0 END + $2::bigint <= t.tokens_per_minute)
		RETURNING t.id
	), r AS (
		INSERT INTO reservations (id, tenant, run_id, tokens, lease_until, created_at)
		SELECT $9, u.id, $10, $2::bigint, $11, $3::timestamptz FROM u
	)
	SELECT EXISTS (SELECT 1 FROM u), ` + ledgerCols + ` FROM tenants WHERE id = $1`

// settleSQL deletes reservation $1 and charges its tenant $7 tokens at $3
// (capped so used stays within the limit), logging $9/$10 (prompt,
// completion) of model $2 in the usage ledger. The tenant row is locked
// (FOR UPDATE in o) before the charge is computed from it.
var settleSQL = `WITH r AS (
		DELETE FROM reservations WHERE id = $1 RETURNING tenant, run_id, tokens
	), o AS (
		SELECT t.id, t.token_limit, ` + dueSQL + ` AS due,
			CASE WHEN ` + dueSQL + ` THEN 0 ELSE t.used END AS used0,
			` + windowStartSQL + ` AS ws, ` + windowEndSQL + ` AS we
		FROM tenants t JOIN r ON r.tenant = t.id
		FOR UPDATE OF t
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
	)
	SELECT charged FROM c`

const ledgerCols = `id, token_limit, budget_window, used, reserved, window_start, window_end, tokens_per_minute, minute_start, minute_used`

func scanLedger(sc scanner, extra ...any) (rules.Ledger, error) {
	var l rules.Ledger
	var window string
	var ws, we, ms *time.Time
	dest := append(extra, &l.Tenant, &l.Limit, &window, &l.Used, &l.Reserved, &ws, &we, &l.TokensPerMinute, &ms, &l.MinuteUsed)
	if err := sc.Scan(dest...); err != nil {
		return l, err
	}
	l.WindowStart, l.WindowEnd, l.MinuteStart = tsVal(ws), tsVal(we), tsVal(ms)
	var err error
	l.Window, err = rules.ParseWindow(agentfleet.BudgetWindow(window))
	return l, err
}

// windowArgs are the calendar bounds at now, for windowStartSQL and
// windowEndSQL.
func windowArgs(now time.Time) (dayStart, dayEnd, monthStart, monthEnd time.Time) {
	dayStart, dayEnd = rules.Window{Kind: agentfleet.WindowDay}.Bounds(now)
	monthStart, monthEnd = rules.Window{Kind: agentfleet.WindowMonth}.Bounds(now)
	return
}

func (s *Store) BudgetReserve(ctx context.Context, p store.BudgetReserveParams) (agentfleet.Reservation, error) {
	p, err := rules.BudgetReserve(p)
	if err != nil {
		return agentfleet.Reservation{}, err
	}
	r := agentfleet.Reservation{ID: rules.NewID(), Tenant: p.Tenant, RunID: p.RunID, Tokens: p.Tokens, LeaseUntil: p.Now.Add(p.Lease)}
	ds, de, ms, me := windowArgs(p.Now)
	type outcome struct {
		ok     bool
		ledger rules.Ledger
	}
	out, err := queryOne(ctx, s, reserveSQL, func(sc scanner) (outcome, error) {
		var o outcome
		var err error
		o.ledger, err = scanLedger(sc, &o.ok)
		return o, err
	}, p.Tenant, p.Tokens, p.Now, rules.MinuteOf(p.Now), ds, de, ms, me, r.ID, p.RunID, r.LeaseUntil)
	if err != nil {
		return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for %s: %w", p.Tokens, p.Tenant, err)
	}
	if out.ok {
		return r, nil
	}
	// Refused. Say why from the ledger as the statement saw it; should
	// that snapshot have had room (it predates the writer the UPDATE
	// waited for), report the window limit.
	_, why := out.ledger.Reserve(p.Tokens, p.Now)
	if why == nil {
		l := out.ledger.Roll(p.Now)
		why = &agentfleet.BudgetExhaustedError{Tenant: p.Tenant, Need: p.Tokens, Limit: l.Limit, Used: l.Used, Reserved: l.Reserved, WindowEnd: l.WindowEnd}
	}
	return agentfleet.Reservation{}, fmt.Errorf("reserve %d tokens for %s: %w", p.Tokens, p.Tenant, why)
}

func (s *Store) BudgetSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	p, err := rules.BudgetSettle(p)
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	ds, de, ms, me := windowArgs(p.Now)
	total := p.Usage.Total()
	charged, err := queryOne(ctx, s, settleSQL, func(sc scanner) (int64, error) {
		var c int64
		err := sc.Scan(&c)
		return c, err
	}, p.ReservationID, p.Model, p.Now, total, ds, de, ms, me, p.Usage.PromptTokens, p.Usage.CompletionTokens)
	if isNotFound(err) {
		err = fmt.Errorf("reservation %s (settled, released or expired): %w", p.ReservationID, store.ErrNotFound)
	}
	if err != nil {
		return store.BudgetSettleResult{}, fmt.Errorf("settle reservation %s: %w", p.ReservationID, err)
	}
	return store.BudgetSettleResult{Charged: charged, Overage: total - charged}, nil
}

func (s *Store) BudgetRelease(ctx context.Context, reservationID string) error {
	_, err := queryOne(ctx, s, `WITH r AS (
			DELETE FROM reservations WHERE id = $1 RETURNING tenant, tokens
		)
		UPDATE tenants t SET reserved = GREATEST(t.reserved - r.tokens, 0) FROM r WHERE t.id = r.tenant RETURNING t.id`,
		func(sc scanner) (string, error) {
			var id string
			err := sc.Scan(&id)
			return id, err
		}, reservationID)
	if isNotFound(err) {
		err = fmt.Errorf("reservation %s (settled, released or expired): %w", reservationID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("release reservation %s: %w", reservationID, err)
	}
	return nil
}

// BudgetExpire releases expired reservations. Concurrent expiries are
// serialised by an advisory lock: each updates several tenant rows, and
// two doing so in different orders could deadlock.
func (s *Store) BudgetExpire(ctx context.Context, now time.Time) (int, error) {
	now = rules.NowOr(now)
	var n int
	err := s.withTx(ctx, func(tx pgx.Tx) error {
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
	if err != nil {
		return 0, fmt.Errorf("expire reservations before %s: %w", now.Format(time.RFC3339), err)
	}
	return n, nil
}

func (s *Store) BudgetGet(ctx context.Context, tenant string, now time.Time) (agentfleet.BudgetState, error) {
	l, err := queryOne(ctx, s, `SELECT `+ledgerCols+` FROM tenants WHERE id = $1`, func(sc scanner) (rules.Ledger, error) {
		return scanLedger(sc)
	}, tenant)
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
	rows, err := queryAll(ctx, s, `SELECT `+key+`, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, count(*) FROM usage_ledger
		WHERE tenant = $1 AND ($2 = '' OR run_id = $2) AND ($3::timestamptz IS NULL OR created_at >= $3)
		GROUP BY `+key+` ORDER BY `+key+` COLLATE "C"`, func(sc scanner) (store.UsageRow, error) {
		var u store.UsageRow
		err := sc.Scan(&u.Key, &u.Usage.PromptTokens, &u.Usage.CompletionTokens, &u.Calls)
		return u, err
	}, p.Tenant, p.RunID, tsArg(p.Since))
	if err != nil {
		return nil, fmt.Errorf("list usage of %s: %w", p.Tenant, err)
	}
	return rows, nil
}
