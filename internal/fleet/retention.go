package fleet

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Retention's configuration: the sweep itself is internal/maintain's
// (maintain.Retention, with its interval, batch and pause defaults).
const (
	// RetentionDefault is how long ended runs are kept when
	// AGENTFLEET_RETENTION is unset.
	RetentionDefault = 30 * 24 * time.Hour
	// RetentionMin is the shortest retention the environment accepts: a
	// shorter one deletes runs before their clients read the answer.
	RetentionMin = time.Minute
)

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
