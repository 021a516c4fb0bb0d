// Package postgres is the production store backend: PostgreSQL through
// pgx v5. It is the only package of the module that imports pgx; nothing
// it returns carries a pgx type.
//
// It owns the Postgres schema (migrations/, applied on Open under an
// advisory lock, so any number of processes may start at once) and the
// SQL: the driver.Driver primitives (driver.go and one file per noun),
// over which the rules package implements store.Store (see rules.Store's
// doc). It must not know NATS, HTTP or the turn engine.
//
// How it stays correct and fast under concurrency:
//   - The hot writes are single statements (or one pipelined batch, which
//     Postgres runs as one implicit transaction): a turn commit is one
//     UPDATE fenced on the run's turn whose CTEs append the steps and the
//     events; TurnCommitMany does the same for a whole batch with arrays;
//     a budget reservation is one UPDATE that checks the limit and a CTE
//     that inserts the reservation; recording a model reply with its
//     charge is one INSERT whose CTEs settle the charge only if the reply
//     was inserted. No client round trip happens while a row lock is
//     held, except inside a shared pipeline (below), whose locks are
//     taken in the same order. A turn is at most four round trips: its
//     load (TurnLoad: the run, started on turn 1, and its history), the
//     reservation (none for an unlimited tenant), the record and charge,
//     and the commit.
//   - Concurrent calls share round trips and commits (pipeline.go): turn
//     loads, reply records and sessionless run creations that arrive
//     while a pipeline is on the wire (or, when calls come fast, within
//     a millisecond) go out together in the next one, as one
//     transaction, and the turn loads of a pipeline share one statement
//     for the runs and one for their histories; turn commits are batched
//     by their caller (TurnCommitMany).
//   - A run's steps, events and model replies have no foreign key to the
//     run: every insert of them is joined to the run's fenced UPDATE or
//     reads the run in the same statement, and the key's per-row checks
//     were most of a commit's cost. A trigger deletes them with their run
//     (migration 0003).
//   - Locks are always taken in one order: run rows (sorted by id), then
//     session advisory locks (sorted by key); reservation rows before the
//     tenant row. Settles lock the tenant row FOR NO KEY UPDATE, which
//     does not block the foreign-key checks (FOR KEY SHARE) of inserts
//     that reference the tenant (runs, reservations, the usage ledger).
//     Deadlocks cannot form; should Postgres report one (or a
//     serialization failure) anyway, the whole transaction is retried.
//   - Runs of one session are created under a per-session advisory lock,
//     which a run's end takes too before it hands out the session's next
//     run: of two concurrent creates exactly one is startable, and a run
//     created while the head ends is either startable or handed out.
//
// Connections come from a pgxpool.Pool of at most Config.MaxConns. Every
// call holds one connection only for its own statements (or transaction,
// or pipeline) and never across calls, so the pool is the only bound on
// concurrency. A connection idle for over a second is pinged before use
// (pgxpool's default), so a server restart costs a reconnect, not a failed
// call; one left broken or inside a transaction is closed on release, not
// reused. The session settings (search_path for Config.Schema, timezone,
// application_name) travel in the startup message, not in an AfterConnect
// hook: that costs no extra round trip per new connection, and since they
// become the session's defaults a RESET or DISCARD ALL cannot lose them.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// MaxConnsDefault is the pool size when Config.MaxConns is zero.
const MaxConnsDefault = 10

// Advisory lock namespaces (the first key of the two-key form), so the
// store's locks never collide with another application's on the same
// database.
const (
	lockMigrate int32 = 0x61660001
	lockSession int32 = 0x61660002
	lockExpire  int32 = 0x61660003
	// lockDeliveries is a trigger's delivery log (trigger.go).
	lockDeliveries int32 = 0x61660007
	// lockAgent is one agent's name, while it gets a version (agent.go).
	lockAgent int32 = 0x61660011
)

// Config configures Open.
type Config struct {
	// URL is a libpq-style connection string or URL, e.g.
	// postgres://user@host:5432/db?sslmode=disable. Required. pgxpool's
	// pool_* settings (pool_max_conn_lifetime, pool_health_check_period,
	// ...) are honoured, except pool_max_conns: MaxConns sizes the pool.
	URL string
	// Schema, when set, holds the store's tables: created when missing
	// and put first on the search path. Lets several stores (tests,
	// tenants of a shared cluster) live in one database.
	Schema string
	// MaxConns caps open connections. Zero means MaxConnsDefault.
	MaxConns int
}

var schemaPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (c Config) withDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = MaxConnsDefault
	}
	return c
}

func (c Config) validate() error {
	if c.URL == "" {
		return errors.New("postgres: Config.URL is empty: set it, e.g. postgres://postgres@127.0.0.1:5432/agentfleet?sslmode=disable")
	}
	if c.Schema != "" && !schemaPattern.MatchString(c.Schema) {
		return fmt.Errorf("postgres: Config.Schema %q: use letters, digits and '_' (at most 63, not starting with a digit)", c.Schema)
	}
	if c.MaxConns < 0 {
		return errors.New("postgres: Config.MaxConns is negative: use zero for the default")
	}
	if c.MaxConns > math.MaxInt32 {
		return fmt.Errorf("postgres: Config.MaxConns %d is too large: use at most %d", c.MaxConns, math.MaxInt32)
	}
	return nil
}

// Store is the Postgres store. It is safe for concurrent use.
type Store struct {
	// *rules.Store implements the nouns moved behind the driver seam
	// (see its doc) over this package's driver (driver.go); the methods
	// below implement the rest.
	*rules.Store
	cfg  Config
	pool *pgxpool.Pool
	pipe pipeline
}

var _ store.Store = (*Store)(nil)

// Open connects, creates the schema when Config.Schema names one, and
// applies pending migrations.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	// NewWithConfig opens no connection (MinConns is zero); the first one
	// is opened by migrate, so an unreachable server fails Open there.
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: create pool: %w", err)
	}
	s := &Store{cfg: cfg, pool: pool}
	s.Store = rules.NewStore(s.Driver())
	s.pipe.calls.Linger = pipelineLinger
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// poolConfig is the pool's configuration for cfg (already defaulted and
// validated).
func poolConfig(cfg Config) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse Config.URL: %w", err)
	}
	pc.MaxConns = int32(cfg.MaxConns) // validate bounds it
	// Startup parameters, not an AfterConnect SET: see the package doc.
	cc := pc.ConnConfig
	if cfg.Schema != "" {
		// Unqualified table names resolve in the store's schema alone,
		// which is what keeps stores sharing a database apart.
		cc.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	}
	// Timestamps cross the wire as instants either way; UTC keeps any
	// server-side date arithmetic and text output unambiguous.
	cc.RuntimeParams["timezone"] = "UTC"
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "agentfleet"
	}
	return pc, nil
}

// Close closes the pool. It waits for calls still running to give back
// their connections, so none outlives it; later calls fail.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// migrate applies pending migrations in one transaction under an advisory
// lock keyed by the schema: a second process waits, then finds nothing to
// do. Postgres DDL is transactional, so a failed migration leaves nothing
// half-applied.
func (s *Store) migrate(ctx context.Context) error {
	key := s.cfg.Schema
	if key == "" {
		key = "(search_path)"
	}
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		exec := func(sql string, args ...any) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		}
		if err := exec(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockMigrate, key); err != nil {
			return err
		}
		if s.cfg.Schema != "" {
			if err := exec(`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{s.cfg.Schema}.Sanitize()); err != nil {
				return err
			}
		}
		return rules.Migrate(migrationFS, "migrations", rules.Migrator{
			Exec: func(sql string) error { return exec(sql) },
			Table: `CREATE TABLE IF NOT EXISTS schema_migrations (
				version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`,
			Applied: func() ([]int, error) {
				rows, _ := tx.Query(ctx, `SELECT version FROM schema_migrations`)
				return pgx.CollectRows(rows, pgx.RowTo[int])
			},
			Record: func(m rules.Migration, now time.Time) error {
				return exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`, m.Version, m.Name, now)
			},
		})
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// withConn runs fn on a pooled connection. fn must not keep c, or
// anything read from it, past its return: the connection goes back to
// the pool then (or is closed, if fn left it broken or in a transaction).
func (s *Store) withConn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: acquire connection: %w", err)
	}
	defer c.Release()
	return fn(c.Conn())
}

// maxAttempts bounds retries of a transaction Postgres aborted as a
// deadlock victim or a serialization failure: both leave nothing behind,
// so running it again is safe. Functions passed to withTx, exec.batch and
// retried must therefore be safe to run more than once.
const maxAttempts = 3

// retried runs fn on a pooled connection, again while Postgres aborts it
// as a deadlock victim or a serialization failure, and maps errors to
// store's sentinels.
func (s *Store) retried(ctx context.Context, fn func(c *pgx.Conn) error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = s.withConn(ctx, fn); !retryable(err) {
			break
		}
	}
	return mapErr(err)
}

// withTx runs fn in a transaction and maps errors to store's sentinels.
func (s *Store) withTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retried(ctx, func(c *pgx.Conn) error { return pgx.BeginFunc(ctx, c, fn) })
}

// sendBatch sends b on q and reads its results with read.
func sendBatch(ctx context.Context, q pgq, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	br := q.SendBatch(ctx, b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// mapErr turns driver errors callers branch on into store's sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w", store.ErrNotFound)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %s", store.ErrConflict, pe.Message)
		case "23503": // foreign_key_violation
			return fmt.Errorf("%w: a referenced row does not exist: %s", store.ErrNotFound, pe.Message)
		case "23514", "22P02", "22023": // check_violation, invalid_text_representation, invalid_parameter_value
			return fmt.Errorf("%w: %s", store.ErrInvalid, pe.Message)
		case "22021", "22P05": // character_not_in_repertoire, untranslatable_character
			// A NUL or bad byte that rules did not clean or refuse
			// (a lookup by such an id, say): the caller's input.
			return fmt.Errorf("%w: text is not valid UTF-8 or holds U+0000: %s", store.ErrInvalid, pe.Message)
		}
	}
	return err
}

// Helpers for nullable columns: zero values are SQL NULL.

func tsArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func bytesArg(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// scanner is a row to scan: pgx.Row or pgx.Rows.
type scanner = rules.Scanner

// pgTime is where a timestamptz column scans to: a time.Time, in UTC,
// the zero time for NULL.
type pgTime time.Time

func (t *pgTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	*t = pgTime{}
	if v.Valid {
		*t = pgTime(v.Time.UTC())
	}
	return nil
}

// scans reads the store's rows (rules.Scans) from this schema.
var scans = rules.Scans{Time: func(t *time.Time) any { return (*pgTime)(t) }}

// collect runs sql on q and scans every row.
func collect[T any](ctx context.Context, q pgq, sql string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, scan)
}

// collectBatch reads the rows of a batch's next query with scan.
func collectBatch[T any](br pgx.BatchResults, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return collectRows(rows, scan)
}

// collectRows scans every row and closes rows.
func collectRows[T any](rows pgx.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	return rules.Collect(rows, scan)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
