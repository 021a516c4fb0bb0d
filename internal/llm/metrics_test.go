package llm

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

// failing is a Client whose calls fail with its errors in turn, then
// succeed.
type failing struct{ errs []error }

func (f *failing) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return agentfleet.ModelResponse{}, err
	}
	return agentfleet.ModelResponse{Usage: agentfleet.Usage{PromptTokens: 300, CompletionTokens: 40}}, nil
}

func (f *failing) Stream(ctx context.Context, req agentfleet.ModelRequest, _ func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	return f.Complete(ctx, req)
}

// Failed calls count by class, and their durations carry the status (or
// class) as error_type; a call that succeeded observes its tokens.
func TestMetricsClassifyModelCalls(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	c := m.Instrument(&failing{errs: []error{
		&openaiwire.APIError{StatusCode: 503},
		fmt.Errorf("call: %w", &openaiwire.APIError{StatusCode: 429}),
		fmt.Errorf("attempt 3: %w", openaiwire.ErrCallTimeout),
		context.DeadlineExceeded,
		errors.New("dial tcp: connection refused"),
	}})
	req := agentfleet.ModelRequest{Model: "gpt-x"}
	for range 5 {
		_, err := c.Complete(context.Background(), req)
		require.Error(t, err)
	}
	_, err := c.Stream(context.Background(), req, nil)
	require.NoError(t, err)

	for class, want := range map[string]float64{"5xx": 1, "4xx": 1, "timeout": 2, "other": 1} {
		require.Equal(t, want, testutil.ToFloat64(m.errors.WithLabelValues(class)), class)
	}
	for errType, want := range map[string]uint64{"503": 1, "429": 1, "timeout": 2, "other": 1, "": 1} {
		require.Equal(t, want, observations(t, m.duration.WithLabelValues("chat", "gpt-x", errType)), "error_type %q", errType)
	}
	in := m.tokens.WithLabelValues("chat", "gpt-x", "input")
	require.Equal(t, uint64(1), observations(t, in), "only the call that succeeded has tokens")
	var dm dto.Metric
	require.NoError(t, in.(prometheus.Metric).Write(&dm))
	require.Equal(t, 300.0, dm.GetHistogram().GetSampleSum())
}

func observations(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var dm dto.Metric
	require.NoError(t, o.(prometheus.Metric).Write(&dm))
	return dm.GetHistogram().GetSampleCount()
}
