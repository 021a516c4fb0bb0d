package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver/drivertest"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openSQLite(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		tb.Fatalf("open sqlite store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// The contract suite, against every backend: TestStore/sqlite/...,
// TestStore/postgres/...
func TestStore(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		storetest.Exercise(t,
			func(t *testing.T) store.Store { return openSQLite(t, filepath.Join(t.TempDir(), "store.db")) },
			storetest.WithOpener(func(t *testing.T) func(ctx context.Context) (store.Store, error) {
				path := filepath.Join(t.TempDir(), "store.db")
				return func(ctx context.Context) (store.Store, error) { return sqlite.Open(ctx, sqlite.Config{Path: path}) }
			}))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.URL(t) // skip (or fail in CI) up front when there is no database
		storetest.Exercise(t,
			func(t *testing.T) store.Store { return pgtest.Open(t) },
			storetest.WithOpener(func(t *testing.T) func(ctx context.Context) (store.Store, error) {
				url, schema := pgtest.Schema(t)
				return func(ctx context.Context) (store.Store, error) {
					return postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
				}
			}))
	})
}

// The driver contract suite, against every backend: TestDriver/sqlite/...,
// TestDriver/postgres/...
func TestDriver(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		drivertest.Exercise(t, func(t *testing.T) drivertest.Backend {
			s := openSQLite(t, filepath.Join(t.TempDir(), "store.db"))
			return drivertest.Backend{Driver: s.Driver(), Store: s}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.URL(t)
		drivertest.Exercise(t, func(t *testing.T) drivertest.Backend {
			s := pgtest.Open(t)
			return drivertest.Backend{Driver: s.Driver(), Store: s}
		})
	})
}

// Config mistakes fail Open with a message that says what to do.
func TestOpenConfig(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]sqlite.Config{
		"no path":          {},
		"memory":           {Path: ":memory:"},
		"uri":              {Path: "file:x.db?mode=ro"},
		"negative timeout": {Path: "x.db", BusyTimeout: -time.Second},
		"bad synchronous":  {Path: "x.db", Synchronous: "OFF"},
	} {
		_, err := sqlite.Open(ctx, cfg)
		if err == nil {
			t.Errorf("sqlite %s: opened", name)
		}
	}
	for name, cfg := range map[string]postgres.Config{
		"no url":         {},
		"bad schema":     {URL: "postgres://localhost/x", Schema: "a-b"},
		"negative conns": {URL: "postgres://localhost/x", MaxConns: -1},
		"unparsable url": {URL: "postgres://%zz"},
		"no server":      {URL: "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"},
	} {
		_, err := postgres.Open(ctx, cfg)
		if err == nil {
			t.Errorf("postgres %s: opened", name)
		}
	}
}

// Benchmarks: the turn commit is the fleet's hottest write, and the turn
// path (reserve, record and charge, commit) all a turn writes.
//
//	go test -run '^$' -bench 'TurnCommit|TurnPath' -benchtime 3s ./internal/store/
//
// Each reports commits/s or turns/s. Postgres needs
// AGENTFLEET_TEST_DATABASE_URL.

func benchStores(b *testing.B, run func(b *testing.B, s store.Store)) {
	b.Run("sqlite", func(b *testing.B) { run(b, openSQLite(b, filepath.Join(b.TempDir(), "bench.db"))) })
	b.Run("postgres", func(b *testing.B) { run(b, pgtest.Open(b)) })
}

// benchCommit is a realistic turn: the model's reply, the observation and
// a log step; five events; 2 KB of carried args.
func benchCommit(runID string, turn int) store.TurnCommitParams {
	reply := "```javascript\nfunction run(args) {\n" + strings.Repeat("  log(args.items.length);\n", 24) + "  return args;\n}\n```"
	args, _ := json.Marshal(map[string]any{"items": strings.Repeat("x", 2000), "turn": turn})
	usage := agentfleet.Usage{PromptTokens: 1200, CompletionTokens: 180}
	return store.TurnCommitParams{
		RunID: runID, Turn: turn, Status: agentfleet.StatusRunning, Args: args, Usage: usage, DataBytesCarried: int64(len(args)),
		Steps: []agentfleet.Step{
			{Kind: agentfleet.StepModel, Content: reply, Model: "bench-model", Usage: usage},
			{Kind: agentfleet.StepObservation, Content: "logs: 24 lines\nreturned: {items: string(2000), turn: number}"},
			{Kind: agentfleet.StepObservation, Content: "note"},
		},
		Events: []agentfleet.Event{
			{Type: agentfleet.EventModelCall, Tokens: &agentfleet.Tokens{Prompt: 1200, Completion: 180}},
			{Type: agentfleet.EventExecuteJS, Content: reply},
			{Type: agentfleet.EventLog, Content: "24"},
			{Type: agentfleet.EventExecuteJSResult, Summary: "{items: string(2000), turn: number}"},
			{Type: agentfleet.EventDataUpdate, Args: json.RawMessage(`{"keys":["items","turn"]}`)},
		},
	}
}

// benchRuns creates n running runs of an unlimited tenant.
func benchRuns(b *testing.B, s store.Store, n int) []string {
	_, ids := benchTenantRuns(b, s, store.TenantCreateParams{}, n)
	return ids
}

// benchTenantRuns creates a tenant and n running runs of it.
func benchTenantRuns(b *testing.B, s store.Store, tp store.TenantCreateParams, n int) (string, []string) {
	ctx := context.Background()
	tenant := fmt.Sprint("bench-", time.Now().UnixNano())
	tp.ID = tenant
	if _, err := s.TenantCreate(ctx, tp); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		res, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: tenant, Message: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.RunTransition(ctx, store.RunTransitionParams{ID: res.Run.ID, To: agentfleet.StatusRunning}); err != nil {
			b.Fatal(err)
		}
		ids[i] = res.Run.ID
	}
	return tenant, ids
}

// parallelism: commits are I/O bound; run several goroutines per CPU, as
// a worker runs several turn slots.
const parallelism = 8

func BenchmarkTurnCommit(b *testing.B) {
	benchStores(b, func(b *testing.B, s store.Store) {
		ctx := context.Background()
		b.SetParallelism(parallelism)
		// One run per goroutine, each committing its turns in order.
		ids := benchRuns(b, s, runtime.GOMAXPROCS(0)*parallelism)
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			id := ids[next.Add(1)-1]
			for turn := 1; pb.Next(); turn++ {
				if _, err := s.TurnCommit(ctx, benchCommit(id, turn)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	})
}

// BenchmarkTurnPath does what one turn does to the store, from
// concurrent turn slots: reserve the model call's budget, record the
// reply and charge it in one call, commit the turn (2 steps, 6 events).
// "unlimited" is a tenant without limits (no tenant row writes at all);
// "limited" one with a limit it never reaches (every reserve and charge
// updates the tenant row). Reports turns/s.
func BenchmarkTurnPath(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit int64
	}{{"unlimited", 0}, {"limited", 1 << 50}} {
		b.Run(c.name, func(b *testing.B) {
			benchStores(b, func(b *testing.B, s store.Store) {
				ctx := context.Background()
				b.SetParallelism(parallelism)
				tenant, ids := benchTenantRuns(b, s, store.TenantCreateParams{TokenLimit: c.limit}, runtime.GOMAXPROCS(0)*parallelism)
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					id := ids[next.Add(1)-1]
					for turn := 1; pb.Next(); turn++ {
						if err := benchTurn(ctx, s, tenant, id, turn); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
			})
		})
	}
}

// benchTurn is one turn's store calls.
func benchTurn(ctx context.Context, s store.Store, tenant, runID string, turn int) error {
	p := benchCommit(runID, turn)
	p.Steps = p.Steps[:2]
	p.Events = append(p.Events, agentfleet.Event{Type: agentfleet.EventLog, Content: "done"})
	r, err := s.BudgetReserve(ctx, store.BudgetReserveParams{Tenant: tenant, RunID: runID, Tokens: 4000})
	if err != nil {
		return err
	}
	res, err := s.ModelReplyRecord(ctx, store.ModelReplyRecordParams{
		ModelReply: store.ModelReply{RunID: runID, Turn: turn, Content: p.Steps[0].Content, Model: "bench-model", Usage: p.Usage, UsageReported: true},
		Charge:     &store.BudgetSettleParams{ReservationID: r.ID, Tenant: r.Tenant, RunID: r.RunID, Usage: p.Usage, Model: "bench-model"},
	})
	if err != nil {
		return err
	}
	if res.Existed || res.ChargeErr != nil {
		return fmt.Errorf("turn %d of %s: not charged (existed %v): %v", turn, runID, res.Existed, res.ChargeErr)
	}
	_, err = s.TurnCommit(ctx, p)
	return err
}

// BenchmarkTurnCommitMany commits batches of 32 turns (of 32 runs) per
// call, as a busy worker's group commit does.
func BenchmarkTurnCommitMany(b *testing.B) {
	const batch = 32
	benchStores(b, func(b *testing.B, s store.Store) {
		ctx := context.Background()
		b.SetParallelism(2)
		ids := benchRuns(b, s, runtime.GOMAXPROCS(0)*2*batch)
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			k := int(next.Add(1) - 1)
			mine := ids[k*batch : (k+1)*batch]
			ps := make([]store.TurnCommitParams, batch)
			for turn := 1; pb.Next(); turn++ {
				for i, id := range mine {
					ps[i] = benchCommit(id, turn)
				}
				_, errs, err := s.TurnCommitMany(ctx, ps)
				if err != nil {
					b.Error(err)
					return
				}
				for _, err := range errs {
					if err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "commits/s")
	})
}
