package maintain

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet/internal/store"
)

// Retention: the dispatcher whose scheduler leads deletes ended runs
// older than AGENTFLEET_RETENTION with their trace. Batches are sized by
// time, not count (a trace may be 20 rows or 20,000): on SQLite every
// write waits for the one writer while a batch runs. Each batch is
// followed by a pause at least as long, so the sweep holds the writer at
// most half the time and a turn commit waits at most one batch.
const (
	// RetentionIntervalDefault is how often the sweep looks for runs due.
	RetentionIntervalDefault = 5 * time.Minute
	// RetentionBatchDefault is the most runs one transaction deletes.
	RetentionBatchDefault = 500
	// RetentionPauseDefault is the least pause between two batches.
	RetentionPauseDefault = 10 * time.Millisecond

	// retentionBatchTarget is how long a batch should take, and
	// retentionBatchFirst the size a sweep starts from.
	retentionBatchTarget = 10 * time.Millisecond
	retentionBatchFirst  = 50
)

// RetentionConfig configures the retention sweep: Age is how long ended
// runs are kept (positive); Interval, Batch and Pause are zero for
// RetentionIntervalDefault, RetentionBatchDefault and
// RetentionPauseDefault. Deleted, when set, counts the runs deleted.
type RetentionConfig struct {
	Store    store.Store
	Age      time.Duration
	Interval time.Duration
	Batch    int
	Pause    time.Duration
	Leading  Leading
	Deleted  prometheus.Counter
	Logger   *slog.Logger
}

// Retention deletes ended runs older than its age, on the leader.
type Retention struct {
	cfg RetentionConfig
	log *slog.Logger
	// size is the runs the next transaction deletes, at most cfg.Batch,
	// following how long the last one took (nextBatch).
	size   int
	target time.Duration
}

// NewRetention returns the retention sweep.
func NewRetention(cfg RetentionConfig) *Retention {
	cfg.Interval = cmp.Or(cfg.Interval, RetentionIntervalDefault)
	cfg.Batch = cmp.Or(cfg.Batch, RetentionBatchDefault)
	cfg.Pause = cmp.Or(cfg.Pause, RetentionPauseDefault)
	if cfg.Deleted == nil {
		cfg.Deleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentfleet_runs_deleted_unregistered"})
	}
	return &Retention{cfg: cfg, log: logger(cfg.Logger), size: min(cfg.Batch, retentionBatchFirst), target: retentionBatchTarget}
}

// Run sweeps every interval until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	r.log.Info("retention: deleting ended runs", "older_than", r.cfg.Age, "every", r.cfg.Interval)
	return every(ctx, r.cfg.Interval, r.log, "retention: delete ended runs", func(ctx context.Context) error {
		n, err := r.Pass(ctx, time.Now())
		if n > 0 {
			r.log.Info("retention: deleted ended runs", "runs", n, "older_than", r.cfg.Age)
		}
		return err
	})
}

// Pass deletes, a batch at a time, the runs that ended before now-age. It
// stops when a batch comes back short (nothing more is due), when this
// process stops leading (asked before every batch), or when ctx ends.
func (r *Retention) Pass(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-r.cfg.Age)
	total := 0
	for r.cfg.Leading.Now() {
		start := time.Now()
		n, err := r.cfg.Store.RunDeleteEnded(ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: r.size})
		took := time.Since(start)
		total += n
		r.cfg.Deleted.Add(float64(n))
		if err != nil {
			return total, fmt.Errorf("retention: %w (%d deleted)", err, total)
		}
		if n < r.size {
			break
		}
		r.size = nextBatch(r.size, took, r.target, r.cfg.Batch)
		select {
		case <-ctx.Done():
			return total, nil
		case <-time.After(max(r.cfg.Pause, took)):
		}
	}
	return total, nil
}

// nextBatch is the size of the batch after one of size runs that took
// took: half when it ran over target, double (up to most) when it took
// under half of it.
func nextBatch(size int, took, target time.Duration, most int) int {
	switch {
	case took > target:
		return max(1, size/2)
	case took < target/2:
		return min(most, size*2)
	}
	return size
}
