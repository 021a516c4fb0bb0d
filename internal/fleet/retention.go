package fleet

import (
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
	// RetentionDefault is how long ended runs are kept when
	// AGENTFLEET_RETENTION is unset.
	RetentionDefault = 30 * 24 * time.Hour
	// RetentionMin is the shortest retention the environment accepts: a
	// shorter one deletes runs before their clients read the answer.
	RetentionMin = time.Minute
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

// retentionSweep deletes ended runs older than age.
type retentionSweep struct {
	store    store.Store
	age      time.Duration
	interval time.Duration
	// batch bounds size, the runs the next transaction deletes, which
	// follows how long the last one took (nextBatch).
	batch  int
	size   int
	target time.Duration
	pause  time.Duration
	// leading says whether this process may sweep now; it is asked
	// before every batch, so a dispatcher that loses the lease stops.
	leading func() bool
	deleted prometheus.Counter
	log     *slog.Logger
}

func newRetentionSweep(st store.Store, age, interval time.Duration, batch int, pause time.Duration,
	leading func() bool, deleted prometheus.Counter, log *slog.Logger) *retentionSweep {
	return &retentionSweep{store: st, age: age, interval: interval, batch: batch, size: min(batch, retentionBatchFirst),
		target: retentionBatchTarget, pause: pause, leading: leading, deleted: deleted, log: log}
}

// run sweeps every interval until ctx ends.
func (r *retentionSweep) run(ctx context.Context) {
	r.log.Info("retention: deleting ended runs", "older_than", r.age, "every", r.interval)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.pass(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			r.log.Warn("retention: delete ended runs", "deleted", n, "err", err)
		} else if n > 0 {
			r.log.Info("retention: deleted ended runs", "runs", n, "older_than", r.age)
		}
	}
}

// pass deletes, a batch at a time, the runs that ended before now-age. It
// stops when a batch comes back short (nothing more is due), when this
// process stops leading, or when ctx ends.
func (r *retentionSweep) pass(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-r.age)
	total := 0
	for r.leading() {
		start := time.Now()
		n, err := r.store.RunDeleteEnded(ctx, store.RunDeleteEndedParams{EndedBefore: cutoff, Limit: r.size})
		took := time.Since(start)
		total += n
		r.deleted.Add(float64(n))
		if err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
		if n < r.size {
			break
		}
		r.size = nextBatch(r.size, took, r.target, r.batch)
		select {
		case <-ctx.Done():
			return total, nil
		case <-time.After(max(r.pause, took)):
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

// newRunsDeleted registers agentfleet_runs_deleted_total on reg, with both
// reasons present from the start.
func newRunsDeleted(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_runs_deleted_total",
		Help: "Ended runs deleted with their trace, by reason: retention (older than AGENTFLEET_RETENTION) or api (DELETE /v1/runs/{id}).",
	}, []string{"reason"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("fleet: register runs deleted metric: %w", err)
	}
	c.WithLabelValues("retention")
	c.WithLabelValues("api")
	return c, nil
}
