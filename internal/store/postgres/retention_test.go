package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Retention finds ended runs through runs_ended and their steps, events
// and replies by key, whatever the statistics say: a scan of any of them
// would read the whole store once per batch. The plans the connection
// caches while the tables are nearly empty are the ones it keeps.
func TestRunDeleteEndedDoesNotScan(t *testing.T) {
	t.Parallel()
	f := newPlanFixture(t)
	s, ctx := f.s, f.ctx
	ended := func(n int) time.Time {
		var last time.Time
		for _, id := range f.queued(t, n) {
			_, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: id, Turn: 1})
			require.NoError(t, err)
			_, err = s.ModelReplyRecord(ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{RunID: id, Turn: 1, Content: "x"}})
			require.NoError(t, err)
			res, err := s.TurnCommit(ctx, store.TurnCommitParams{RunID: id, Turn: 1, Status: agentfleet.StatusCompleted,
				Answer: []byte(`"done"`), Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: "x"}},
				Events: []agentfleet.Event{{Type: agentfleet.EventResponse}, {Type: agentfleet.EventDone}}})
			require.NoError(t, err)
			last = res.Run.UpdatedAt
		}
		return last.Add(time.Microsecond)
	}
	drain := func(cutoff time.Time, batch int) int {
		total := 0
		for {
			n, err := s.RunDeleteEnded(ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: batch})
			require.NoError(t, err)
			if total += n; n < batch {
				return total
			}
		}
	}
	// Enough batches on nearly empty tables for the connection to settle
	// on cached plans.
	require.Equal(t, 40, drain(ended(40), 4))
	cutoff := ended(600)
	f.queued(t, 200) // unfinished runs, outside the index
	before, index0 := f.scans(t)
	require.Equal(t, 600, drain(cutoff, 50))
	after, index1 := f.scans(t)
	for table, n := range after {
		assert.Zero(t, n-before[table], fmt.Sprintf("%d scans of %s for 13 delete batches", n-before[table], table))
	}
	assert.GreaterOrEqual(t, index1-index0, int64(13), "the batches find their runs in runs_ended")
}

// scans returns the sequential scans so far of the tables a run's
// deletion reads, and the scans of the runs_ended index.
func (f planFixture) scans(t *testing.T) (map[string]int64, int64) {
	t.Helper()
	f.counters(t) // waits for the counters to be published
	rows, err := f.admin.Query(f.ctx, `SELECT relname, seq_scan FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname IN ('runs', 'steps', 'events', 'model_replies')`, f.schema)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		require.NoError(t, rows.Scan(&name, &n))
		out[name] = n
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, 4)
	var ended int64
	require.NoError(t, f.admin.QueryRow(f.ctx, `SELECT idx_scan FROM pg_stat_user_indexes
		WHERE schemaname = $1 AND indexrelname = 'runs_ended'`, f.schema).Scan(&ended))
	return out, ended
}
