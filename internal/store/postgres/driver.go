package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// exec is the driver.Executor: on the pool (tx nil, each call its own
// statement or pipeline) or inside a transaction.
type exec struct {
	s  *Store
	tx pgx.Tx
}

// pgDriver is the driver.Driver the rules run on.
type pgDriver struct{ exec }

var _ driver.Driver = pgDriver{}

// Driver is s as the rules see it: its primitives, for the driver
// contract suite (driver/drivertest).
func (s *Store) Driver() driver.Driver { return pgDriver{exec{s: s}} }

func (d pgDriver) Tx(ctx context.Context, fn func(x driver.Executor) error) error {
	return d.s.withTx(ctx, func(tx pgx.Tx) error { return fn(exec{s: d.s, tx: tx}) })
}

// Read runs fn on the pool: each read is its own snapshot, as before
// the seam.
func (d pgDriver) Read(ctx context.Context, fn func(x driver.Executor) error) error {
	return fn(d.exec)
}

// pgq is what a primitive's statements run on: the transaction, a pooled
// connection, or the pool (each statement its own transaction).
type pgq interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func (e exec) q() pgq {
	if e.tx != nil {
		return e.tx
	}
	return e.s.pool
}

// do runs fn on the transaction or, outside one, on a pooled connection:
// retried (see retried) when retry is set, which a statement or pipeline
// alone in its implicit transaction may be. Errors come back mapped.
func (e exec) do(ctx context.Context, retry bool, fn func(q pgq) error) error {
	if e.tx != nil {
		return mapErr(fn(e.tx))
	}
	if retry {
		return e.s.retried(ctx, func(c *pgx.Conn) error { return fn(c) })
	}
	return mapErr(e.s.withConn(ctx, func(c *pgx.Conn) error { return fn(c) }))
}

// one runs sql and scans its one row.
func one[T any](ctx context.Context, e exec, sql string, scan func(scanner) (T, error), args ...any) (T, error) {
	var v T
	err := e.do(ctx, true, func(q pgq) error {
		var err error
		v, err = scan(q.QueryRow(ctx, sql, args...))
		return err
	})
	return v, err
}

// all runs sql and scans every row.
func all[T any](ctx context.Context, e exec, sql string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	var out []T
	err := e.do(ctx, false, func(q pgq) error {
		var err error
		out, err = collect(ctx, q, sql, scan, args...)
		return err
	})
	return out, err
}

// batch sends a pipeline, read consumes its results in order: on the pool
// as one implicit transaction (any error rolls back every statement of
// it; retried as retried is), inside a transaction as part of it.
func (e exec) batch(ctx context.Context, build func() *pgx.Batch, read func(br pgx.BatchResults) error) error {
	return e.do(ctx, true, func(q pgq) error { return sendBatch(ctx, q, build(), read) })
}

// inTx runs fn in the executor's transaction, or in one of its own.
func (e exec) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if e.tx != nil {
		return mapErr(fn(e.tx))
	}
	return e.s.withTx(ctx, fn)
}

// run runs a statement and returns the rows it affected.
func (e exec) run(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := e.do(ctx, false, func(q pgq) error {
		tag, err := q.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
