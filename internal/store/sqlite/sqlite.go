// Package sqlite is the embedded store backend: one SQLite file, pure Go
// (modernc.org/sqlite), the default when no Postgres URL is configured.
//
// It owns the SQLite schema (migrations/, applied on Open) and the SQL:
// the driver.Driver primitives (driver.go and one file per noun), over
// which the rules package implements store.Store (see rules.Store's doc).
// It must not know NATS, HTTP or the turn engine; callers see only
// store.Store and store's sentinel errors.
//
// Concurrency: SQLite allows one writer at a time, and a write
// transaction that starts as a reader and later writes can fail with
// SQLITE_BUSY no matter the busy timeout. So every write goes through one
// dedicated connection (a *sql.DB capped at one connection) whose
// transactions begin IMMEDIATE, taking the write lock up front: goroutines
// of one process queue on that connection, other processes wait on the
// busy timeout, and nothing can deadlock. Reads use a separate pool of
// read-only connections, which WAL mode lets run alongside the writer.
//
// Statement counts matter here more than anywhere: the writer is one
// connection, so every statement it runs is time no other write can use.
// The hot writes are therefore as few statements as the semantics allow:
// a turn commit is one fenced UPDATE per run (the run is read only when
// the fence fails, to say why) and one multi-row INSERT each for the
// steps and the events of the whole batch; recording a model reply is one
// fenced INSERT, plus its charge in the same transaction (one more INSERT
// for an unlimited tenant); reserving for an unlimited tenant is one read
// on the read pool and no write at all.
//
// Semantics that the store interface leaves open and this backend (like
// store/postgres) settles: see store/storetest, the contract both pass.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentfleet/agentfleet/internal/group"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Defaults for Config.
const (
	BusyTimeoutDefault        = 10 * time.Second
	SynchronousDefault        = "NORMAL"
	CheckpointIntervalDefault = time.Second
)

// autoCheckpointPages is the writer's own checkpoint threshold (80 MB of
// WAL at 4 KB pages): only a backstop for when the background
// checkpointer falls behind, since a checkpoint on the commit path stalls
// that commit for the whole copy and fsync.
const autoCheckpointPages = 20000

// ReadConnsDefault is the read pool size when Config.ReadConns is zero.
func ReadConnsDefault() int { return max(4, runtime.GOMAXPROCS(0)) }

// Config configures Open.
type Config struct {
	// Path is the database file, created (with its directory's WAL and
	// shared-memory files beside it) when missing. Required.
	Path string
	// BusyTimeout is how long a write waits for another process holding
	// the write lock. Zero means BusyTimeoutDefault.
	BusyTimeout time.Duration
	// ReadConns caps the read pool. Zero means ReadConnsDefault().
	ReadConns int
	// Synchronous is SQLite's synchronous setting for the writer:
	// "NORMAL" (default: in WAL mode a power cut may lose the last
	// commits but never corrupts the file) or "FULL" (every commit
	// reaches the disk before it returns).
	Synchronous string
	// CheckpointInterval is how often a background goroutine copies the
	// WAL into the database file (a PASSIVE checkpoint, which blocks
	// neither the writer nor readers). Zero means
	// CheckpointIntervalDefault.
	CheckpointInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = BusyTimeoutDefault
	}
	if c.ReadConns == 0 {
		c.ReadConns = ReadConnsDefault()
	}
	if c.Synchronous == "" {
		c.Synchronous = SynchronousDefault
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = CheckpointIntervalDefault
	}
	c.Synchronous = strings.ToUpper(c.Synchronous)
	return c
}

func (c Config) validate() error {
	if c.Path == "" {
		return errors.New("sqlite: Config.Path is empty: name the database file, e.g. .agentfleet/agentfleet.db")
	}
	if strings.ContainsRune(c.Path, '?') || strings.HasPrefix(c.Path, "file:") || c.Path == ":memory:" {
		return fmt.Errorf("sqlite: Config.Path %q: give a plain file path (no URI, no '?', no :memory:)", c.Path)
	}
	if c.BusyTimeout < 0 {
		return errors.New("sqlite: Config.BusyTimeout is negative: use zero for the default")
	}
	if c.ReadConns < 0 {
		return errors.New("sqlite: Config.ReadConns is negative: use zero for the default")
	}
	if c.CheckpointInterval < 0 {
		return errors.New("sqlite: Config.CheckpointInterval is negative: use zero for the default")
	}
	if c.Synchronous != "NORMAL" && c.Synchronous != "FULL" {
		return fmt.Errorf("sqlite: Config.Synchronous %q: use NORMAL or FULL", c.Synchronous)
	}
	return nil
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	// *rules.Store implements the nouns moved behind the driver seam
	// (see its doc) over this package's driver (driver.go); the methods
	// below implement the rest.
	*rules.Store
	cfg Config
	w   *sql.DB // one connection: every write transaction
	r   *sql.DB // read-only pool
	ck  *sql.DB // one connection: background checkpoints
	// stopCheckpoints ends the checkpoint goroutine; checkpointsDone is
	// closed when it has.
	stopCheckpoints context.CancelFunc
	checkpointsDone chan struct{}
	// wstmts and rstmts cache prepared statements by SQL text, for the
	// writer's connection and the read pool. Preparing costs more than
	// running most of our statements (SQLite parses and plans each one),
	// so every statement is prepared once per connection and reused.
	wstmts sync.Map // string -> *sql.Stmt on w
	rstmts sync.Map // string -> *sql.Stmt on r
	rd     reader
	// The group commit's queue of writes (see write).
	writes group.Queue[*writeReq]
}

var _ store.Store = (*Store)(nil)

// Open opens (creating when missing) the database at cfg.Path and applies
// pending migrations.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	busy := strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10)
	wq := url.Values{
		"_txlock":       {"immediate"},
		"_busy_timeout": {busy},
		"_foreign_keys": {"1"},
		"_journal_mode": {"WAL"},
		"_synchronous":  {cfg.Synchronous},
		// temp_store MEMORY keeps statement journals (which a multi-row
		// INSERT needs, to undo itself should a row fail) off the disk:
		// with the default they spill to a temp file, one write per
		// page touched.
		"_pragma": {fmt.Sprintf("wal_autocheckpoint(%d)", autoCheckpointPages), "temp_store(MEMORY)"},
	}
	w, err := sql.Open("sqlite", cfg.Path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{cfg: cfg, w: w}
	if err := s.migrateWhenFree(ctx); err != nil {
		_ = w.Close()
		return nil, err
	}
	rq := url.Values{
		"_busy_timeout": {busy},
		"_query_only":   {"1"},
	}
	s.r, err = sql.Open("sqlite", cfg.Path+"?"+rq.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", cfg.Path, err)
	}
	s.r.SetMaxOpenConns(cfg.ReadConns)
	s.r.SetMaxIdleConns(cfg.ReadConns)
	s.ck, err = sql.Open("sqlite", cfg.Path+"?"+url.Values{"_busy_timeout": {busy}}.Encode())
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s for checkpoints: %w", cfg.Path, err)
	}
	s.ck.SetMaxOpenConns(1)
	s.rd = reader{s}
	s.Store = rules.NewStore(s.Driver())
	cctx, stop := context.WithCancel(context.Background())
	s.stopCheckpoints, s.checkpointsDone = stop, make(chan struct{})
	go s.checkpoints(cctx, cfg.CheckpointInterval)
	return s, nil
}

// checkpoints copies the WAL into the database file every interval until
// ctx ends, so commits never pay for it. A failed checkpoint (another
// process's in progress, a busy reader) is simply tried again next time;
// the writer's own auto-checkpoint is the backstop.
func (s *Store) checkpoints(ctx context.Context, every time.Duration) {
	defer close(s.checkpointsDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = s.ck.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// Close stops the checkpointer and closes the connections.
func (s *Store) Close() error {
	if s.stopCheckpoints != nil {
		s.stopCheckpoints()
		<-s.checkpointsDone
	}
	var errs []error
	for _, m := range []*sync.Map{&s.wstmts, &s.rstmts} {
		m.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
	}
	for _, db := range []*sql.DB{s.r, s.ck} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

// migrate applies pending migrations in one IMMEDIATE transaction, so two
// processes opening the same file at once apply each migration once: the
// second waits for the write lock and then finds nothing to do.
// migrateWhenFree migrates, trying again for up to the busy timeout while
// the database is busy. Processes that open a new database at once race
// to switch it to WAL mode, and SQLite answers the losers SQLITE_BUSY at
// once instead of waiting out the busy timeout.
func (s *Store) migrateWhenFree(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	for {
		err := s.migrate(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

func (s *Store) migrate(ctx context.Context) error {
	err := s.write(ctx, func(tx *wtx) error {
		return rules.Migrate(migrationFS, "migrations", rules.Migrator{
			Exec: func(q string) error {
				_, err := tx.ExecContext(ctx, q)
				return err
			},
			Table: `CREATE TABLE IF NOT EXISTS schema_migrations (
				version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
			Applied: func() ([]int, error) {
				return all(ctx, exec{s: s}.inWrite(tx), `SELECT version FROM schema_migrations`, rules.ScanInt)
			},
			Record: func(m rules.Migration, now time.Time) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
					m.Version, m.Name, now.UnixMicro())
				return err
			},
		})
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate %s: %w", s.cfg.Path, err)
	}
	return nil
}

// write runs fn in a write transaction on the single writer connection.
// fn must do all its work through tx: asking the writer pool for another
// connection would wait for ever on the one fn holds.
//
// Writes are group-committed: while one transaction runs, the writes that
// arrive queue up, and the next transaction runs them all, each inside a
// savepoint so that one failing rolls back alone. An idle store commits a
// lone write at once; a busy one pays for BEGIN and COMMIT (and writes the
// pages the batch shares, such as a tenant's row or the events index)
// once per batch instead of once per write (group.Queue: the caller
// that finds no batch running leads one, then hands the lead on).
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	req := &writeReq{ctx: ctx, fn: fn}
	s.writes.Do(req, writeBatchMax, s.flush)
	return req.err
}

// writeBatchMax bounds a group commit, so one transaction stays short.
const writeBatchMax = 64

// writeReq is one queued write.
type writeReq struct {
	ctx      context.Context
	fn       func(tx *wtx) error
	err      error
	finished bool
}

// flush runs a batch of writes in one transaction.
func (s *Store) flush(batch []*writeReq) {
	finish := func(err error) {
		for _, r := range batch {
			if !r.finished {
				r.err, r.finished = err, true
			}
		}
	}
	// The transaction serves every caller in the batch, so no single
	// caller's context may cut it short; each fn runs its statements
	// under its own context.
	bctx := context.Background()
	sqltx, err := s.w.BeginTx(bctx, nil)
	if err != nil {
		finish(mapErr(err))
		return
	}
	tx := &wtx{Tx: sqltx, stmts: txStmts{tx: sqltx, cache: &s.wstmts}}
	defer func() { prepareMissed(bctx, s.w, &s.wstmts, tx.stmts.missed) }()
	if len(batch) == 1 {
		r := batch[0]
		if err := r.fn(tx); err != nil {
			_ = sqltx.Rollback()
			finish(mapErr(err))
			return
		}
		finish(mapErr(sqltx.Commit()))
		return
	}
	tx.shared = true
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err, r.finished = err, true
			continue
		}
		if _, err := tx.ExecContext(bctx, `SAVEPOINT w`); err != nil {
			_ = sqltx.Rollback()
			finish(mapErr(err))
			return
		}
		if err := r.fn(tx); err != nil {
			r.err, r.finished = mapErr(err), true
			if _, rerr := tx.ExecContext(bctx, `ROLLBACK TO w`); rerr != nil {
				_ = sqltx.Rollback()
				finish(mapErr(rerr))
				return
			}
		}
		if _, err := tx.ExecContext(bctx, `RELEASE w`); err != nil {
			_ = sqltx.Rollback()
			finish(mapErr(err))
			return
		}
	}
	finish(mapErr(sqltx.Commit()))
}

// prepareMissed prepares on db and caches, now that the transaction's
// connection is free again, the statements it had to prepare for itself
// alone.
func prepareMissed(ctx context.Context, db *sql.DB, cache *sync.Map, missed []string) {
	for _, q := range missed {
		_, _ = prepared(ctx, db, cache, q)
	}
}

// prepared is q's statement on db: cached, or prepared and cached.
func prepared(ctx context.Context, db *sql.DB, cache *sync.Map, q string) (*sql.Stmt, error) {
	if st, ok := cache.Load(q); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if old, loaded := cache.LoadOrStore(q, st); loaded {
		_ = st.Close()
		return old.(*sql.Stmt), nil
	}
	return st, nil
}

// wtx is a write transaction whose statements come from the writer's
// cache (txStmts).
type wtx struct {
	*sql.Tx
	stmts txStmts
	// shared: the transaction runs a group of writes. A caller giving up
	// must then not interrupt its statement: SQLite rolls an interrupted
	// write's whole transaction back, every other write of the group and
	// the savepoints with it. Its write, once begun, runs to its end.
	shared bool
}

// ctx is what a statement of this transaction runs under.
func (t *wtx) ctx(ctx context.Context) context.Context {
	if t.shared {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	ctx = t.ctx(ctx)
	st, err := t.stmts.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t *wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.stmts.QueryContext(t.ctx(ctx), q, args...)
}

func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.stmts.QueryRowContext(t.ctx(ctx), q, args...)
}

// reader runs reads on the read pool through cached statements.
type reader struct{ s *Store }

func (r reader) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	return prepared(ctx, r.s.r, &r.s.rstmts, q)
}

func (r reader) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return query(ctx, r, q, args)
}

func (r reader) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return queryRow(ctx, r, r.s.r, q, args)
}

// readTx runs fn in one read transaction on the read pool (one snapshot
// for all its reads), through the read pool's cached statements.
func (s *Store) readTx(ctx context.Context, fn func(q queryer) error) error {
	sqltx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	t := &txStmts{tx: sqltx, cache: &s.rstmts}
	err = fn(t)
	_ = sqltx.Rollback() // a read transaction has nothing to commit
	prepareMissed(ctx, s.r, &s.rstmts, t.missed)
	return mapErr(err)
}

// txStmts are a transaction's statements, from the cache of its
// connections (by SQL text). A statement not cached yet is prepared on
// the transaction and noted in missed, to be cached after it ends:
// preparing it on the pool would need a second connection (the writer's
// one is busy with the transaction), and with every connection held by
// such transactions none would come.
type txStmts struct {
	tx     *sql.Tx
	cache  *sync.Map
	missed []string
}

func (t *txStmts) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := t.cache.Load(q); ok {
		return t.tx.StmtContext(ctx, st.(*sql.Stmt)), nil
	}
	t.missed = append(t.missed, q)
	return t.tx.PrepareContext(ctx, q)
}

func (t *txStmts) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return query(ctx, t, q, args)
}

func (t *txStmts) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return queryRow(ctx, t, t.tx, q, args)
}

// stmtSource gives the prepared statement of q.
type stmtSource interface {
	stmt(ctx context.Context, q string) (*sql.Stmt, error)
}

// query runs q through src's statement.
func query(ctx context.Context, src stmtSource, q string, args []any) (*sql.Rows, error) {
	st, err := src.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRow runs q through src's statement. One that fails to prepare is
// run on unprepared, which fails the same way, as a Row.
func queryRow(ctx context.Context, src stmtSource, unprepared interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}, q string, args []any) *sql.Row {
	st, err := src.stmt(ctx, q)
	if err != nil {
		return unprepared.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// queryer is what reads need: the read pool, or a write transaction that
// must see its own writes.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// mapErr turns driver errors callers branch on into store's sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %v", store.ErrConflict, err)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%w: a referenced row does not exist: %v", store.ErrNotFound, err)
		case sqlite3.SQLITE_CONSTRAINT_CHECK:
			return fmt.Errorf("%w: %v", store.ErrInvalid, err)
		}
	}
	return err
}

// Timestamps are stored as microseconds since the epoch; zero is NULL.

func tsArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// microTime is where a timestamp column scans to: a time.Time, in UTC,
// the zero time for NULL.
type microTime time.Time

func (t *microTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = microTime{}
	case int64:
		*t = microTime(time.UnixMicro(v).UTC())
	default:
		return fmt.Errorf("timestamp: got %T, want microseconds since the epoch", src)
	}
	return nil
}

// scans reads the store's rows (rules.Scans) from this schema.
var scans = rules.Scans{Time: func(t *time.Time) any { return (*microTime)(t) }}

// scanner is a row to scan: *sql.Row or *sql.Rows.
type scanner = rules.Scanner

// blobArg stores an absent raw value as NULL.
func blobArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
