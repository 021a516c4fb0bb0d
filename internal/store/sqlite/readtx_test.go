package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// A read transaction holds one of the read pool's connections. Were it to
// prepare a statement it has not used before on the pool, it would need a
// second: with every connection held by such transactions, none would
// ever finish. One connection makes that certain.
func TestReadTransactionNeedsOneConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "r.db"), ReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	// An unlimited tenant's budget is read in one transaction, with
	// statements nothing has used yet; then again, from the cache.
	for range 2 {
		if _, err := s.BudgetGet(ctx, "acme", time.Now()); err != nil {
			t.Fatalf("budget of an unlimited tenant on one read connection: %v", err)
		}
	}
}
