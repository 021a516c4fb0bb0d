package llm

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

// Metrics are a model client's Prometheus metrics: the GenAI semantic
// conventions' client histograms (gen_ai.client.operation.duration and
// gen_ai.client.token.usage, with their buckets) and the failed calls by
// status class.
type Metrics struct {
	duration *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	tokens   *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewMetrics registers the model client metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_operation_duration_seconds",
			Help:    "Duration of model calls (gen_ai.client.operation.duration), by operation, requested model and error type (empty: none).",
			Buckets: []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92},
		}, []string{"gen_ai_operation_name", "gen_ai_request_model", "error_type"}),
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens per model call (gen_ai.client.token.usage), by operation, requested model and token type (input, output).",
			Buckets: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864},
		}, []string{"gen_ai_operation_name", "gen_ai_request_model", "gen_ai_token_type"}),
		// The conventions' buckets for gen_ai.server.time_to_first_token:
		// measured here, at the client, from the request to the first
		// content delta of a streamed call.
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "Time from a streamed model call's start to its first content delta (gen_ai.server.time_to_first_token), by operation and requested model.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10},
		}, []string{"gen_ai_operation_name", "gen_ai_request_model"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentfleet_model_call_errors_total",
			Help: "Model calls that failed, by status class: 4xx and 5xx (the provider's answer), timeout, or other (the connection).",
		}, []string{"class"}),
	}
	reg.MustRegister(m.duration, m.ttft, m.tokens, m.errors)
	return m
}

// Instrument wraps c so that its calls are measured.
func (m *Metrics) Instrument(c Client) Client {
	if m == nil {
		return c
	}
	return instrumented{c: c, m: m}
}

type instrumented struct {
	c Client
	m *Metrics
}

func (i instrumented) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	start := time.Now()
	resp, err := i.c.Complete(ctx, req)
	i.m.observe(req, resp, err, time.Since(start))
	return resp, err
}

func (i instrumented) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	start := time.Now()
	first := true
	resp, err := i.c.Stream(ctx, req, func(ch agentfleet.ModelChunk) error {
		if first && !ch.Done && ch.Delta != "" {
			first = false
			i.m.ttft.WithLabelValues("chat", req.Model).Observe(time.Since(start).Seconds())
		}
		if fn == nil {
			return nil
		}
		return fn(ch)
	})
	i.m.observe(req, resp, err, time.Since(start))
	return resp, err
}

func (m *Metrics) observe(req agentfleet.ModelRequest, resp agentfleet.ModelResponse, err error, took time.Duration) {
	const op = "chat"
	errType := ""
	if err != nil {
		class, status := ErrorClass(err)
		m.errors.WithLabelValues(class).Inc()
		errType = class
		if status > 0 {
			errType = strconv.Itoa(status)
		}
	}
	m.duration.WithLabelValues(op, req.Model, errType).Observe(took.Seconds())
	if err == nil {
		m.tokens.WithLabelValues(op, req.Model, "input").Observe(float64(resp.Usage.PromptTokens))
		m.tokens.WithLabelValues(op, req.Model, "output").Observe(float64(resp.Usage.CompletionTokens))
	}
}

// ErrorClass classifies a failed model call: by the provider's HTTP
// status (class "4xx" or "5xx", and the status), as a timeout (the
// client's per-call limit or the caller's deadline), or as other (the
// connection, a reply that would not parse).
func ErrorClass(err error) (class string, status int) {
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		status = hs.HTTPStatus()
		return strconv.Itoa(status/100) + "xx", status
	}
	if errors.Is(err, openaiwire.ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return "timeout", 0
	}
	return "other", 0
}
