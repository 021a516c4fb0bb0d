package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig is the pool configuration Open would use for cfg.
func PoolConfig(cfg Config) (*pgxpool.Config, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return poolConfig(cfg)
}

// Session is what one pooled connection reports of its session.
type Session struct {
	PID                                   uint32
	Schema, SearchPath, TimeZone, AppName string
}

// AcquireSession takes a connection from s's pool and reads its session;
// it stays taken until release is called.
func AcquireSession(ctx context.Context, s *Store) (_ Session, release func(), _ error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return Session{}, nil, err
	}
	var x Session
	err = c.QueryRow(ctx, `SELECT pg_backend_pid(), current_schema(), current_setting('search_path'),
		current_setting('TimeZone'), current_setting('application_name')`).
		Scan(&x.PID, &x.Schema, &x.SearchPath, &x.TimeZone, &x.AppName)
	if err != nil {
		c.Release()
		return Session{}, nil, err
	}
	return x, c.Release, nil
}

// SharedPipelines reports how many pipelines carried more than one call,
// and how many calls they carried.
func SharedPipelines(s *Store) (pipelines, calls int64) {
	return s.pipe.shared.Load(), s.pipe.sharedCalls.Load()
}

// MergedCalls reports how many calls shared set-based statements in a
// committed pipeline.
func MergedCalls(s *Store) int64 { return s.pipe.merged.Load() }

// HoldPipeline sends a call that sleeps on the server for d through s's
// pipeline, so calls made meanwhile queue up behind it.
func HoldPipeline(ctx context.Context, s *Store, d time.Duration) error {
	return s.pipelined(ctx, "", func(b *pgx.Batch) { b.Queue(`SELECT pg_sleep($1)`, d.Seconds()) },
		func(br pgx.BatchResults) error { _, err := br.Exec(); return err })
}

// InsertQueuedRunsForTest inserts n queued runs of tenant in one
// statement, far faster than n RunCreate calls: a backlog for benchmarks.
func InsertQueuedRunsForTest(ctx context.Context, s *Store, tenant string, n int) error {
	return s.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO runs (id, tenant, agent, status, message, created_at, updated_at)
			SELECT 'backlog-' || g, $1, 'default', 'queued', 'task', now(), now() FROM generate_series(1, $2) g`, tenant, n)
		return err
	})
}

// CountQueuedForTest is the queue gate's count of a tenant.
func CountQueuedForTest(ctx context.Context, s *Store, tenant string) (limit, unfinished int, err error) {
	return s.Driver().QueueCount(ctx, tenant)
}

// AnalyzeForTest vacuums and analyzes runs, as autovacuum would after a
// bulk insert (the visibility map lets counts scan the index only).
func AnalyzeForTest(ctx context.Context, s *Store) error {
	return s.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `VACUUM ANALYZE runs`)
		return err
	})
}
