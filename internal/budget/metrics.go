package budget

import (
	"github.com/agentfleet/agentfleet"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the budget's Prometheus metrics. A nil *Metrics records
// nothing, so components can take one optionally.
type Metrics struct {
	tokensUsed   *prometheus.CounterVec
	reservations *prometheus.CounterVec
	reservedTok  *prometheus.CounterVec
	rejections   *prometheus.CounterVec
	overage      *prometheus.CounterVec
	waitingRuns  *prometheus.GaugeVec
	resumed      *prometheus.CounterVec
}

// NewMetrics registers the budget metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		tokensUsed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_tokens_used_total", Help: "Tokens charged to tenants, by tenant, model and kind (prompt, completion).",
		}, []string{"tenant", "model", "kind"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_budget_reservations_total", Help: "Budget reservations granted, by tenant.",
		}, []string{"tenant"}),
		reservedTok: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_budget_reserved_tokens_total", Help: "Tokens reserved before model calls, by tenant.",
		}, []string{"tenant"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_budget_rejections_total", Help: "Reservations refused for lack of budget, by tenant.",
		}, []string{"tenant"}),
		overage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_budget_overage_tokens_total", Help: "Tokens a provider reported beyond what the limit let us charge, by tenant.",
		}, []string{"tenant"}),
		waitingRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentfleet_budget_waiting_runs", Help: "Runs parked in waiting_budget, by tenant.",
		}, []string{"tenant"}),
		resumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_budget_resumed_runs_total", Help: "Parked runs woken because budget returned, by tenant.",
		}, []string{"tenant"}),
	}
	reg.MustRegister(m.tokensUsed, m.reservations, m.reservedTok, m.rejections, m.overage, m.waitingRuns, m.resumed)
	return m
}

func (m *Metrics) reserved(tenant string, tokens int64) {
	if m == nil {
		return
	}
	m.reservations.WithLabelValues(tenant).Inc()
	m.reservedTok.WithLabelValues(tenant).Add(float64(tokens))
}

func (m *Metrics) rejected(tenant string) {
	if m == nil {
		return
	}
	m.rejections.WithLabelValues(tenant).Inc()
}

func (m *Metrics) settled(tenant, model string, usage agentfleet.Usage, overage int64) {
	if m == nil {
		return
	}
	m.tokensUsed.WithLabelValues(tenant, model, "prompt").Add(float64(usage.PromptTokens))
	m.tokensUsed.WithLabelValues(tenant, model, "completion").Add(float64(usage.CompletionTokens))
	if overage > 0 {
		m.overage.WithLabelValues(tenant).Add(float64(overage))
	}
}

func (m *Metrics) waiting(tenant string, n int) {
	if m == nil {
		return
	}
	m.waitingRuns.WithLabelValues(tenant).Set(float64(n))
}

func (m *Metrics) woke(tenant string, n int) {
	if m == nil {
		return
	}
	m.resumed.WithLabelValues(tenant).Add(float64(n))
}
