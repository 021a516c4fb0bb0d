package scheduler

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the scheduler's Prometheus metrics; a nil *Metrics records
// nothing.
type Metrics struct {
	queuedTurns  *prometheus.GaugeVec
	forwardedN   *prometheus.CounterVec
	spilledN     *prometheus.CounterVec
	backlogReads prometheus.Counter
	leading      prometheus.Gauge
}

// NewMetrics registers the scheduler metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		queuedTurns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentfleet_scheduler_queued_turns", Help: "Turns waiting for their fair share, held by the scheduler or spilled to AF_SPILL, by tenant.",
		}, []string{"tenant"}),
		forwardedN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_scheduler_forwarded_turns_total", Help: "Turns handed to the workers' queue, by tenant.",
		}, []string{"tenant"}),
		spilledN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_scheduler_spilled_turns_total", Help: "Turns moved to AF_SPILL because their tenant held more than its share of the hold, by tenant.",
		}, []string{"tenant"}),
		backlogReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentfleet_scheduler_backlog_reads_total", Help: "Reads of the workers' queue backlog (a JetStream consumer info request each).",
		}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentfleet_scheduler_leading",
			Help: "1 while this process schedules (it holds the scheduler lease), else 0. Summed over a fleet's dispatchers it should be 1.",
		}),
	}
	reg.MustRegister(m.queuedTurns, m.forwardedN, m.spilledN, m.backlogReads, m.leading)
	return m
}

func (m *Metrics) setLeading(on bool) {
	if m == nil {
		return
	}
	if on {
		m.leading.Set(1)
	} else {
		m.leading.Set(0)
	}
}

func (m *Metrics) queued(tenant string, n int) {
	if m == nil {
		return
	}
	m.queuedTurns.WithLabelValues(tenant).Set(float64(n))
}

func (m *Metrics) forwarded(tenant string, left int) {
	if m == nil {
		return
	}
	m.forwardedN.WithLabelValues(tenant).Inc()
	m.queuedTurns.WithLabelValues(tenant).Set(float64(left))
}

func (m *Metrics) backlogRead() {
	if m == nil {
		return
	}
	m.backlogReads.Inc()
}

func (m *Metrics) spilled(tenant string) {
	if m == nil {
		return
	}
	m.spilledN.WithLabelValues(tenant).Inc()
}
