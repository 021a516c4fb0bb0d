package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The hot lookups must use an index, whatever the table's size: a scan
// costs nothing in a small test database and everything in a busy one.
func TestHotQueriesUseIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name, sql, index string
		args             []any
	}{
		{"run by idempotency key", runByIdempotencySQL, "runs_idempotency", []any{"acme", "key-1"}},
		{"session blocked", sessionBlockedSQL, "runs_session", []any{"acme", "s1", 10}},
		{"session head", rules.SessionHeadSQL, "runs_session", []any{"acme", "s1"}},
		{"ended runs", endedRunsSQL, "runs_ended", []any{1, 1, 100}},
	} {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		if !strings.Contains(joined, "USING INDEX "+c.index) && !strings.Contains(joined, "USING COVERING INDEX "+c.index) {
			t.Errorf("%s: plan %q does not use index %s", c.name, joined, c.index)
		}
	}
}
