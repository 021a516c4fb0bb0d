package worker

import (
	"time"

	"github.com/agentfleet/agentfleet"

	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the worker's Prometheus metrics; a nil *Metrics records
// nothing.
type Metrics struct {
	turns        *prometheus.CounterVec
	turnSeconds  *prometheus.HistogramVec
	committed    *prometheus.CounterVec
	continued    *prometheus.CounterVec
	carriedBytes prometheus.Counter
	splitBatches prometheus.Counter
	runsEnded    *prometheus.CounterVec
	runSeconds   *prometheus.HistogramVec
	queueWait    prometheus.Histogram
	approvals    *prometheus.CounterVec
}

// NewMetrics registers the worker metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_worker_turn_messages_total", Help: "Turn messages handled, by how they were settled (ack, retry, hand_back, shed: handed back for the worker's own exhaustion, term, dead_letter, abandoned).",
		}, []string{"result"}),
		turnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentfleet_worker_turn_seconds", Help: "Time from pulling a turn message to settling it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"result"}),
		committed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_worker_turns_committed_total", Help: "Turns committed, by tenant and outcome.",
		}, []string{"tenant", "outcome"}),
		continued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_worker_turns_continued_total",
			Help: "Next turns after a commit, by path: in_place (run at once by the same worker, in the same slot), direct (published straight to the workers' queue) or scheduler.",
		}, []string{"path"}),
		carriedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentfleet_data_bytes_carried_total", Help: "Carried bytes kept out of prompts, net of digests.",
		}),
		splitBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentfleet_worker_commit_batches_split_total",
			Help: "Group commits that failed as a whole and were committed turn by turn instead.",
		}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_runs_ended_total", Help: "Runs that ended on a worker, by tenant and status (completed, failed, cancelled, max_turns).",
		}, []string{"tenant", "status"}),
		runSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentfleet_run_duration_seconds", Help: "Time from a run's creation to its end, by status.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10), // 0.1 s to about 7 h
		}, []string{"status"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentfleet_run_queue_wait_seconds", Help: "Time from a run's creation to the start of its first turn on a worker.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms to about 70 min
		}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_approvals_requested_total", Help: "Runs parked to wait for a person's approval of a call, by tenant.",
		}, []string{"tenant"}),
	}
	reg.MustRegister(m.turns, m.turnSeconds, m.committed, m.continued, m.carriedBytes, m.splitBatches, m.runsEnded, m.runSeconds, m.queueWait,
		m.approvals)
	return m
}

func (m *Metrics) turnDone(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.turns.WithLabelValues(result).Inc()
	m.turnSeconds.WithLabelValues(result).Observe(d.Seconds())
}

func (m *Metrics) turnCommitted(tenant string, res loop.TurnResult) {
	if m == nil {
		return
	}
	m.committed.WithLabelValues(tenant, res.Outcome.String()).Inc()
	m.carriedBytes.Add(float64(res.DataBytesCarried))
}

// Paths of a next turn (agentfleet_worker_turns_continued_total).
const (
	pathInPlace   = "in_place"
	pathDirect    = "direct"
	pathScheduler = "scheduler"
)

func (m *Metrics) turnContinued(path string) {
	if m == nil {
		return
	}
	m.continued.WithLabelValues(path).Inc()
}

func (m *Metrics) batchSplit() {
	if m == nil {
		return
	}
	m.splitBatches.Inc()
}

// runEnded counts a run that ended on this worker.
func (m *Metrics) runEnded(run agentfleet.Run) {
	if m == nil {
		return
	}
	m.runsEnded.WithLabelValues(run.Tenant, string(run.Status)).Inc()
	m.runSeconds.WithLabelValues(string(run.Status)).Observe(time.Since(run.CreatedAt).Seconds())
}

// firstTurn observes how long a run waited for its first turn.
func (m *Metrics) firstTurn(run agentfleet.Run) {
	if m == nil {
		return
	}
	m.queueWait.Observe(time.Since(run.CreatedAt).Seconds())
}

func (m *Metrics) approvalRequested(tenant string) {
	if m == nil {
		return
	}
	m.approvals.WithLabelValues(tenant).Inc()
}
