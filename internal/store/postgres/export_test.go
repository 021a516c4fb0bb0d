package postgres

import (
	"context"

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
