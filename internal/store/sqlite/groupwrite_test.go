package sqlite

import (
	"context"
	"database/sql/driver"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/agentfleet/agentfleet/internal/store"
)

// giveUp is the running test's: wait_for_give_up, an SQL function, waits
// for its channel to close and, the first time, a little longer, so that
// the interrupt the driver sends on the cancel lands inside the statement.
var giveUp atomic.Pointer[givingUp]

type givingUp struct {
	closed chan struct{}
	once   sync.Once
}

func init() {
	sqlite.MustRegisterScalarFunction("wait_for_give_up", 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		g := giveUp.Load()
		<-g.closed
		g.once.Do(func() { time.Sleep(100 * time.Millisecond) })
		return int64(1), nil
	})
}

// A write whose caller gives up while its statement runs must not take the
// other writes of its group commit with it. SQLite answers an interrupted
// INSERT inside a transaction by rolling the whole transaction back, so the
// group's savepoints (and every write before it) would be gone ("no such
// savepoint: w").
func TestGroupCommitSurvivesACallerGivingUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := &givingUp{closed: make(chan struct{})}
	giveUp.Store(g)
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "w.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE slow (n INTEGER)`); err != nil {
		t.Fatal(err)
	}

	// The leader's write holds the writer while the others queue up, so
	// they run as one group: a write that gives up midway, then a tenant.
	hold := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = s.write(ctx, func(tx *wtx) error { <-hold; return nil })
	})
	time.Sleep(50 * time.Millisecond)
	quitting, quit := context.WithCancel(ctx)
	var slowErr, tenantErr error
	wg.Go(func() {
		slowErr = s.write(quitting, func(tx *wtx) error {
			// Its statement waits for the cancel, then goes on.
			_, err := tx.ExecContext(quitting, `INSERT INTO slow
				WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)
				SELECT x + wait_for_give_up() FROM c`)
			return err
		})
	})
	time.Sleep(20 * time.Millisecond)
	wg.Go(func() {
		_, tenantErr = s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	})
	time.Sleep(20 * time.Millisecond)
	close(hold)
	time.Sleep(100 * time.Millisecond)
	quit()
	close(g.closed)
	wg.Wait()

	if tenantErr != nil {
		t.Fatalf("a write grouped with one whose caller gave up failed: %v (the slow write: %v)", tenantErr, slowErr)
	}
	if _, err := s.TenantGetByID(ctx, "acme"); err != nil {
		t.Fatalf("the grouped write was not committed: %v", err)
	}
}
