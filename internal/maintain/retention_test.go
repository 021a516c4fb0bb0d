package maintain

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// A sweep deletes only while its process leads: one that never led
// deletes nothing, and one that stops leading stops after the batch in
// hand.
func TestRetentionSweepsOnlyWhileLeading(t *testing.T) {
	st := openTestStore(t)
	cutoff := endRuns(t, st, 30, 1)
	var leadFor atomic.Int64
	sweep := newTestSweep(st, 10, time.Millisecond, func() bool { return leadFor.Add(-1) >= 0 }).fixed()

	n, err := sweep.Pass(t.Context(), cutoff)
	require.NoError(t, err)
	require.Zero(t, n, "not leading")
	require.Equal(t, 30, countRuns(t, st))

	leadFor.Store(1)
	n, err = sweep.Pass(t.Context(), cutoff)
	require.NoError(t, err)
	require.Equal(t, 10, n, "one batch, then no longer leading")
	require.Equal(t, 20, countRuns(t, st))

	leadFor.Store(100)
	n, err = sweep.Pass(t.Context(), cutoff)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	require.Zero(t, countRuns(t, st))
}

// Batches follow how long the last one took, within [1, most].
func TestNextBatch(t *testing.T) {
	const target, most = 10 * time.Millisecond, 500
	for _, tc := range []struct {
		size int
		took time.Duration
		want int
	}{
		{size: 50, took: time.Millisecond, want: 100},
		{size: 400, took: time.Millisecond, want: most},
		{size: most, took: time.Millisecond, want: most},
		{size: 50, took: 7 * time.Millisecond, want: 50},
		{size: 50, took: target, want: 50},
		{size: 50, took: 11 * time.Millisecond, want: 25},
		{size: 50, took: time.Second, want: 25},
		{size: 1, took: time.Second, want: 1},
	} {
		require.Equal(t, tc.want, nextBatch(tc.size, tc.took, target, most), "size %d took %s", tc.size, tc.took)
	}
}

func openTestStore(tb testing.TB) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(tb.TempDir(), "retention.db")})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	if _, err := st.TenantGetByID(context.Background(), "acme"); err != nil {
		_, err = st.TenantCreate(context.Background(), store.TenantCreateParams{ID: "acme"})
		require.NoError(tb, err)
	}
	return st
}

// newTestSweep sweeps st with batches of at most batch runs, age 0 (pass's
// now is the cutoff).
func newTestSweep(st store.Store, batch int, pause time.Duration, leading func() bool) *Retention {
	return NewRetention(RetentionConfig{Store: st, Interval: time.Hour, Batch: batch, Pause: pause, Leading: leading,
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "deleted"}), Logger: slog.New(slog.DiscardHandler)})
}

// fixed makes every batch of r batch runs, however long it takes.
func (r *Retention) fixed() *Retention {
	r.size, r.target = r.cfg.Batch, time.Hour
	return r
}

func countRuns(t *testing.T, st store.Store) int {
	t.Helper()
	res, err := st.RunList(context.Background(), store.RunListParams{Tenant: "acme", Limit: 1000})
	require.NoError(t, err)
	return len(res.Runs)
}

// endRuns makes n completed runs of tenant acme as a worker would, turns
// turns each (a model reply, two steps and four events per turn), from
// several goroutines, and returns a cutoff after all their ends.
func endRuns(tb testing.TB, st store.Store, n, turns int) time.Time {
	tb.Helper()
	ctx := context.Background()
	const writers = 16
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += writers {
				id, err := startRun(ctx, st)
				if err != nil {
					errs[w] = err
					break
				}
				for turn := 1; turn <= turns && err == nil; turn++ {
					status := agentfleet.StatusRunning
					if turn == turns {
						status = agentfleet.StatusCompleted
					}
					_, _, err = commitTurn(ctx, st, id, turn, status)
				}
				errs[w] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(tb, err)
	}
	return time.Now().Add(time.Millisecond)
}

func startRun(ctx context.Context, st store.Store) (string, error) {
	res, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "summarise the input",
		Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
	if err != nil {
		return "", err
	}
	_, err = st.TurnLoad(ctx, store.TurnLoadParams{RunID: res.Run.ID, Turn: 1})
	return res.Run.ID, err
}

// commitTurn records turn's model reply and commits the turn, the two
// writes of a worker's turn, and returns how long each took.
func commitTurn(ctx context.Context, st store.Store, id string, turn int, status agentfleet.RunStatus) (reply, commit time.Duration, err error) {
	usage := agentfleet.Usage{PromptTokens: 120, CompletionTokens: 30}
	content := "Next.\n```javascript\nfunction run(args) { log('step'); return {n: args.n + 1} }\n```"
	start := time.Now()
	if _, err := st.ModelReplyRecord(ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{
		RunID: id, Turn: turn, Content: content, Model: "m", Usage: usage, UsageReported: true}}); err != nil {
		return 0, 0, err
	}
	reply = time.Since(start)
	p := store.TurnCommitParams{RunID: id, Turn: turn, Status: status, Args: []byte(`{"n":1}`), Usage: usage,
		Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: content, Model: "m", Usage: usage},
			{Kind: agentfleet.StepObservation, Content: "step\nreturned {n: number}"}},
		Events: []agentfleet.Event{{Type: agentfleet.EventModelCall, Tokens: &agentfleet.Tokens{Prompt: 120, Completion: 30}},
			{Type: agentfleet.EventExecuteJS, Content: content}, {Type: agentfleet.EventLog, Content: "step"},
			{Type: agentfleet.EventExecuteJSResult, Summary: "{n: number}"}}}
	if status.Terminal() {
		p.Answer = []byte(`"done"`)
		p.Events = append(p.Events, agentfleet.Event{Type: agentfleet.EventDone})
	}
	start = time.Now()
	_, err = st.TurnCommit(ctx, p)
	return reply, time.Since(start), err
}

// BenchmarkTurnCommitDuringRetention times turn commits on SQLite while
// the retention sweep deletes 20,000 ended runs of 3 turns each (about 25
// rows a run), against the same commits with no sweep running. 8 slots
// each make a turn's two writes (model reply, commit) and think 5ms, as
// a worker with a fast model would. It reports the percentiles of those
// writes' latency in microseconds, and the sweep's length and rate.
//
//	go test -run '^$' -bench TurnCommitDuringRetention -benchtime 1x ./internal/maintain/
func BenchmarkTurnCommitDuringRetention(b *testing.B) {
	const ended, slots = 20_000, 8
	for _, bc := range []struct {
		name  string
		batch int // 0: no sweep
		pause time.Duration
		fixed bool // every batch batch runs, however long it takes
	}{
		{name: "idle"},
		{name: "default", batch: RetentionBatchDefault, pause: RetentionPauseDefault},
		{name: "fixed-50", batch: 50, pause: RetentionPauseDefault, fixed: true},
		{name: "fixed-200", batch: 200, pause: RetentionPauseDefault, fixed: true},
		{name: "fixed-1000", batch: 1000, pause: RetentionPauseDefault, fixed: true},
		{name: "fixed-10000-no-pause", batch: store.RunDeleteEndedLimitMax, fixed: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				st := openTestStore(b)
				cutoff := endRuns(b, st, ended, 3)
				b.StartTimer()
				lat, took, deleted := commitsWhile(b, st, slots, func(ctx context.Context) int {
					if bc.batch == 0 {
						select {
						case <-ctx.Done():
						case <-time.After(3 * time.Second):
						}
						return 0
					}
					sw := newTestSweep(st, bc.batch, bc.pause, func() bool { return true })
					if bc.fixed {
						sw.fixed()
					}
					n, err := sw.Pass(ctx, cutoff)
					require.NoError(b, err)
					return n
				})
				if bc.batch > 0 {
					require.Equal(b, ended, deleted)
					b.ReportMetric(float64(took.Milliseconds()), "sweep-ms")
					b.ReportMetric(float64(deleted)/took.Seconds(), "runs-deleted/s")
				}
				slices.Sort(lat)
				at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
				b.ReportMetric(float64(len(lat)), "writes")
				b.ReportMetric(at(0.5), "p50-µs")
				b.ReportMetric(at(0.99), "p99-µs")
				b.ReportMetric(at(1), "max-µs")
			}
		})
	}
}

// commitsWhile runs slots turn loops on runs of their own while work runs,
// and returns the latency of every write they made (model replies and
// commits: a write that arrives while a delete runs waits for it,
// whichever it is), how long work took and what it returned.
func commitsWhile(b *testing.B, st store.Store, slots int, work func(ctx context.Context) int) ([]time.Duration, time.Duration, int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	lats := make([][]time.Duration, slots)
	errs := make([]error, slots)
	for i := range slots {
		wg.Go(func() {
			id, err := startRun(ctx, st)
			for turn := 1; err == nil && ctx.Err() == nil; turn++ {
				var reply, commit time.Duration
				if reply, commit, err = commitTurn(ctx, st, id, turn, agentfleet.StatusRunning); err == nil {
					lats[i] = append(lats[i], reply, commit)
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
			if ctx.Err() == nil {
				errs[i] = err
			}
		})
	}
	start := time.Now()
	n := work(ctx)
	took := time.Since(start)
	cancel()
	wg.Wait()
	for _, err := range errs {
		require.NoError(b, err)
	}
	return slices.Concat(lats...), took, n
}
