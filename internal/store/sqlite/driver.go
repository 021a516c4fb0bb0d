package sqlite

import (
	"context"

	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// exec is the driver.Executor: outside a transaction (tx nil) reads go to
// the read pool and each write is its own group-committed write; inside
// one, everything goes through the write transaction.
type exec struct {
	s  *Store
	q  queryer
	tx *wtx
}

// liteDriver is the driver.Driver the rules run on.
type liteDriver struct{ exec }

var _ driver.Driver = liteDriver{}

// Driver is s as the rules see it: its primitives, for the driver
// contract suite (driver/drivertest).
func (s *Store) Driver() driver.Driver { return liteDriver{exec{s: s, q: s.rd}} }

func (d liteDriver) Tx(ctx context.Context, fn func(x driver.Executor) error) error {
	return d.s.write(ctx, func(tx *wtx) error { return fn(exec{s: d.s, q: tx, tx: tx}) })
}

// Read runs fn in one read transaction on the read pool: one snapshot
// for all its reads.
func (d liteDriver) Read(ctx context.Context, fn func(x driver.Executor) error) error {
	return d.s.readTx(ctx, func(q queryer) error { return fn(exec{s: d.s, q: q}) })
}

// write runs fn in the transaction, or as a write of its own.
func (e exec) write(ctx context.Context, fn func(tx *wtx) error) error {
	if e.tx != nil {
		return mapErr(fn(e.tx))
	}
	return e.s.write(ctx, fn)
}

// inWrite is e inside the write transaction tx.
func (e exec) inWrite(tx *wtx) exec { return exec{s: e.s, q: tx, tx: tx} }

// run runs a write statement and returns the rows it affected.
func (e exec) run(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := e.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// rows runs a write statement that returns rows, and scans them.
func rows[T any](ctx context.Context, e exec, q string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	var out []T
	err := e.write(ctx, func(tx *wtx) error {
		var err error
		out, err = all(ctx, e.inWrite(tx), q, scan, args...)
		return err
	})
	return out, err
}

// row runs a write statement that returns one row, and scans it.
func row[T any](ctx context.Context, e exec, q string, scan func(scanner) (T, error), args ...any) (T, error) {
	var v T
	err := e.write(ctx, func(tx *wtx) error {
		var err error
		v, err = one(ctx, e.inWrite(tx), q, scan, args...)
		return err
	})
	return v, err
}

// one reads one row with scan.
func one[T any](ctx context.Context, e exec, q string, scan func(scanner) (T, error), args ...any) (T, error) {
	v, err := scan(e.q.QueryRowContext(ctx, q, args...))
	return v, mapErr(err)
}

// all reads every row with scan.
func all[T any](ctx context.Context, e exec, q string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	v, err := rules.Collect(rows, scan)
	if err == nil {
		err = rows.Close()
	}
	return v, mapErr(err)
}
