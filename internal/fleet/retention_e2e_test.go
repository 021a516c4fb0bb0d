package fleet_test

import (
	"cmp"
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// deleteCall is one RunDeleteEnded a dispatcher made.
type deleteCall struct {
	limit, deleted int
	err            error
}

// deletesSeen is a real store that reports every RunDeleteEnded it serves.
type deletesSeen struct {
	store.Store
	calls chan deleteCall
}

func (s deletesSeen) RunDeleteEnded(ctx context.Context, p store.RunDeleteEndedParams) (int, error) {
	n, err := s.Store.RunDeleteEnded(ctx, p)
	s.calls <- deleteCall{p.Limit, n, err}
	return n, err
}

// The dispatcher's retention sweep deletes the ended runs due in batches
// of at most RetentionBatch runs, and leaves unfinished runs alone however
// old they are.
func TestDispatcherDeletesEndedRunsInBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "fleet.db")})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)

	// 25 ended runs with a trace, and unfinished runs older than all of
	// them. No worker runs, so nothing moves them.
	newRun := func(to ...agentfleet.RunStatus) string {
		res, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "task",
			Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
		require.NoError(t, err)
		for _, s := range to {
			ev := map[agentfleet.RunStatus]agentfleet.EventType{agentfleet.StatusRunning: agentfleet.EventStarted,
				agentfleet.StatusWaitingApproval: agentfleet.EventApprovalRequested}[s]
			_, err := st.RunTransition(ctx, store.RunTransitionParams{ID: res.Run.ID, To: s,
				Events: []agentfleet.Event{{Type: cmp.Or(ev, agentfleet.EventDone)}}})
			require.NoError(t, err)
		}
		return res.Run.ID
	}
	unfinished := map[string]agentfleet.RunStatus{
		newRun():                         agentfleet.StatusQueued,
		newRun(agentfleet.StatusRunning): agentfleet.StatusRunning,
		newRun(agentfleet.StatusRunning): agentfleet.StatusRunning,
		newRun(agentfleet.StatusRunning, agentfleet.StatusWaitingApproval): agentfleet.StatusWaitingApproval,
	}
	var ended []string
	for i := range 25 {
		end := []agentfleet.RunStatus{agentfleet.StatusCompleted, agentfleet.StatusFailed, agentfleet.StatusCancelled}[i%3]
		ended = append(ended, newRun(agentfleet.StatusRunning, end))
	}

	seen := deletesSeen{Store: st, calls: make(chan deleteCall, 100)}
	reg := fleet.NewRegistry()
	d, err := fleet.NewDispatcher(fleet.DispatcherConfig{
		Listen: "127.0.0.1:0", Store: seen, Bus: b, Registry: reg, Logger: slog.New(slog.DiscardHandler),
		Retention: time.Nanosecond, RetentionInterval: 10 * time.Millisecond, RetentionBatch: 10,
	})
	require.NoError(t, err)
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	next := func() deleteCall {
		t.Helper()
		select {
		case c := <-seen.calls:
			require.NoError(t, c.err)
			return c
		case <-ctx.Done():
			t.Fatal("the dispatcher's sweep did not delete")
			panic("unreachable")
		}
	}
	// Batches of at most 10 runs (fewer when one is slow) until all 25
	// are gone, then a call that finds nothing: the end of that pass, or
	// the next pass.
	calls, total := 0, 0
	for total < len(ended) {
		c := next()
		require.LessOrEqual(t, c.limit, 10)
		require.LessOrEqual(t, c.deleted, c.limit)
		calls, total = calls+1, total+c.deleted
	}
	require.Equal(t, len(ended), total)
	require.GreaterOrEqual(t, calls, 3, "in batches")
	require.Zero(t, next().deleted, "nothing more is due")

	for _, id := range ended {
		_, err := st.RunGetByID(ctx, store.RunGetByIDParams{ID: id})
		require.ErrorIs(t, err, store.ErrNotFound)
		evs, err := st.EventListByRun(ctx, store.EventListByRunParams{RunID: id})
		require.NoError(t, err)
		require.Empty(t, evs)
	}
	for id, status := range unfinished {
		r, err := st.RunGetByID(ctx, store.RunGetByIDParams{ID: id})
		require.NoError(t, err)
		require.Equal(t, status, r.Status)
		evs, err := st.EventListByRun(ctx, store.EventListByRunParams{RunID: id})
		require.NoError(t, err)
		require.NotEmpty(t, evs)
	}
	require.Equal(t, 25, metricValue(t, reg, "agentfleet_runs_deleted_total", "reason", "retention"))
	require.Equal(t, 0, metricValue(t, reg, "agentfleet_runs_deleted_total", "reason", "api"))
}
