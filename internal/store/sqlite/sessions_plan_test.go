package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// A session's reads walk its runs through the session index (and a
// checkpoint its summary steps through steps_summary), never the whole
// runs or steps table.
func TestSessionQueriesUseIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name, sql string
		indexes   []string
		args      []any
	}{
		{"session list", sessionListSQL, []string{"runs_session"}, []any{"acme", "", int64(1) << 60, "", 50}},
		{"session get", rules.SessionGetSQL, []string{"runs_session"}, []any{"acme", "s1"}},
		{"session runs", rules.SessionRunsSQL, []string{"runs_session"}, []any{"acme", "s1", 10}},
		{"session statuses", rules.SessionStatusesSQL, []string{"runs_session"}, []any{"acme", "s1"}},
		{"session checkpoint", sessionCheckpointSQL, []string{"runs_session", "steps_summary"}, []any{"acme", "s1"}},
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
		for _, ix := range c.indexes {
			if !strings.Contains(joined, "INDEX "+ix) {
				t.Errorf("%s: plan %q does not use index %s", c.name, joined, ix)
			}
		}
		if strings.Contains(joined, "SCAN runs") || strings.Contains(joined, "SCAN steps") || strings.Contains(joined, "SCAN s ") ||
			strings.HasSuffix(joined, "SCAN s") {
			t.Errorf("%s: plan %q scans a table", c.name, joined)
		}
	}
}
