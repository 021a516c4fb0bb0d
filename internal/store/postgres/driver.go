package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// exec is the driver.Executor: on the pool (tx nil, each call its own
// statement, retried as queryOne is) or inside a transaction.
type exec struct {
	s  *Store
	tx pgx.Tx
}

// pgDriver is the driver.Driver the rules run on.
type pgDriver struct{ exec }

var _ driver.Driver = pgDriver{}

func (d pgDriver) Tx(ctx context.Context, fn func(x driver.Executor) error) error {
	return d.s.withTx(ctx, func(tx pgx.Tx) error { return fn(exec{s: d.s, tx: tx}) })
}

// pgq is what a primitive's statements run on: the transaction, or
// the pool (each statement its own transaction).
type pgq interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (e exec) q() pgq {
	if e.tx != nil {
		return e.tx
	}
	return e.s.pool
}

// one runs sql and scans its one row, on the transaction or the pool.
func one[T any](ctx context.Context, e exec, sql string, scan func(scanner) (T, error), args ...any) (T, error) {
	if e.tx == nil {
		return queryOne(ctx, e.s, sql, scan, args...)
	}
	v, err := scan(e.tx.QueryRow(ctx, sql, args...))
	return v, mapErr(err)
}

// all runs sql and scans every row, on the transaction or the pool.
func all[T any](ctx context.Context, e exec, sql string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	if e.tx == nil {
		return queryAll(ctx, e.s, sql, scan, args...)
	}
	v, err := collect(ctx, e.tx, sql, scan, args...)
	return v, mapErr(err)
}

// batch sends a pipeline: on the pool as one implicit transaction
// (withBatch), inside a transaction as part of it.
func (e exec) batch(ctx context.Context, build func() *pgx.Batch, read func(br pgx.BatchResults) error) error {
	if e.tx == nil {
		return e.s.withBatch(ctx, build, read)
	}
	br := e.tx.SendBatch(ctx, build())
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return mapErr(err)
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
	if e.tx != nil {
		tag, err := e.tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), mapErr(err)
	}
	var n int64
	err := e.s.withConn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, mapErr(err)
}

// Driver is s as the rules see it: its primitives, for the driver
// contract suite (driver/drivertest).
func (s *Store) Driver() driver.Driver { return pgDriver{exec{s: s}} }

// scanCount scans a key and its count.
func scanCount(sc scanner) (driver.Count, error) {
	var c driver.Count
	return c, sc.Scan(&c.Key, &c.N)
}

// Read runs fn on the pool: each read is its own snapshot, as before
// the seam.
func (d pgDriver) Read(ctx context.Context, fn func(x driver.Executor) error) error {
	return fn(d.exec)
}
