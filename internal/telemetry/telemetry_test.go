package telemetry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

func newTestTracer(t *testing.T) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.NewSimpleSpanProcessor(exp), "test")
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	t.Fatalf("no span %q among %v", name, names)
	return tracetest.SpanStub{}
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A run's turns on different workers, days apart, and the run's own span
// emitted when it ends form one trace: its trace id is the run's id, the
// first turn is a child of the run's span, each later turn a child of the
// turn that sent its message.
func TestARunIsOneTraceAcrossTurns(t *testing.T) {
	tr, exp := newTestTracer(t)
	run := agentfleet.Run{ID: "0b9c6a52-3d1f-4e8a-9b7c-2f4e6d8a1c3e", Tenant: "acme", Agent: "default",
		Status: agentfleet.StatusRunning, CreatedAt: time.Now().Add(-time.Minute)}

	ctx1, end1 := tr.StartTurn(context.Background(), run, 1, "")
	tp1 := tr.Traceparent(ctx1)
	end1("ack", nil)
	// Turn 2's message carries turn 1's traceparent: a fresh context, as
	// on another worker.
	_, end2 := tr.StartTurn(context.Background(), run, 2, tp1)
	end2("ack", nil)
	// A traceparent of another trace (a message from before tracing, or
	// forged) does not move the turn out of its run's trace.
	_, end3 := tr.StartTurn(context.Background(), run, 3, "00-11111111111111111111111111111111-2222222222222222-01")
	end3("nak", errors.New("store down"))

	run.Status, run.Turn = agentfleet.StatusCompleted, 3
	run.Usage = agentfleet.Usage{PromptTokens: 300, CompletionTokens: 60}
	tr.EndRun(context.Background(), run)

	spans := exp.GetSpans()
	want := RunTraceID(run.ID)
	require.Equal(t, "0b9c6a523d1f4e8a9b7c2f4e6d8a1c3e", want.String(), "the run's id is its trace id")
	for _, s := range spans {
		require.Equal(t, want, s.SpanContext.TraceID(), s.Name)
	}
	runSpan := spanNamed(t, spans, "invoke_agent default")
	require.Equal(t, runSpanID(run.ID), runSpan.SpanContext.SpanID())
	require.False(t, runSpan.Parent.IsValid(), "the run's span is the root")
	require.WithinDuration(t, run.CreatedAt, runSpan.StartTime, time.Millisecond, "it starts at the run's creation")
	require.Equal(t, int64(300), attr(runSpan, "gen_ai.usage.input_tokens").AsInt64())
	require.Equal(t, "completed", attr(runSpan, "agentfleet.run.status").AsString())
	require.Equal(t, codes.Unset, runSpan.Status.Code)

	turn1 := spanNamed(t, spans, "turn 1")
	require.Equal(t, runSpan.SpanContext.SpanID(), turn1.Parent.SpanID())
	turn2 := spanNamed(t, spans, "turn 2")
	require.Equal(t, turn1.SpanContext.SpanID(), turn2.Parent.SpanID(), "turn 2 follows the turn that sent its message")
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", want, turn1.SpanContext.SpanID()), tp1)
	turn3 := spanNamed(t, spans, "turn 3")
	require.Equal(t, runSpan.SpanContext.SpanID(), turn3.Parent.SpanID(), "another trace's traceparent is ignored")
	require.Equal(t, codes.Error, turn3.Status.Code)
	require.Equal(t, "nak", attr(turn3, "agentfleet.turn.outcome").AsString())
}

// A run that did not complete ends with an error status naming why.
func TestAFailedRunsSpanIsAnError(t *testing.T) {
	tr, exp := newTestTracer(t)
	tr.EndRun(context.Background(), agentfleet.Run{ID: "not-a-uuid", Agent: "triage", Status: agentfleet.StatusFailed,
		Error: "budget exhausted", CreatedAt: time.Now()})
	s := spanNamed(t, exp.GetSpans(), "invoke_agent triage")
	require.Equal(t, RunTraceID("not-a-uuid"), s.SpanContext.TraceID(), "an id that is no UUID is digested")
	require.Equal(t, codes.Error, s.Status.Code)
	require.Equal(t, "budget exhausted", s.Status.Description)
}

type modelFunc func(context.Context, agentfleet.ModelRequest) (agentfleet.ModelResponse, error)

func (f modelFunc) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	return f(ctx, req)
}

// A model call's span carries the GenAI conventions' attributes, and a
// failed call's error.type says how it failed.
func TestModelCallSpans(t *testing.T) {
	tr, exp := newTestTracer(t)
	calls := []error{nil, &openaiwire.APIError{StatusCode: 429}, fmt.Errorf("attempt 3: %w", openaiwire.ErrCallTimeout), errors.New("connection refused")}
	i := 0
	m := tr.Model(modelFunc(func(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
		err := calls[i]
		i++
		if err != nil {
			return agentfleet.ModelResponse{}, err
		}
		return agentfleet.ModelResponse{Model: "gpt-x-2026", FinishReason: "stop",
			Usage: agentfleet.Usage{PromptTokens: 11, CompletionTokens: 7}}, nil
	}), "openai")
	ctx, end := tr.StartTurn(context.Background(), agentfleet.Run{ID: "r1"}, 1, "")
	for range calls {
		_, _ = m.Complete(ctx, agentfleet.ModelRequest{Model: "gpt-x", MaxTokens: 512})
	}
	end("ack", nil)

	var chats tracetest.SpanStubs
	turn := spanNamed(t, exp.GetSpans(), "turn 1")
	for _, s := range exp.GetSpans() {
		if s.Name == "chat gpt-x" {
			chats = append(chats, s)
			require.Equal(t, turn.SpanContext.SpanID(), s.Parent.SpanID(), "a call is a child of its turn")
			require.Equal(t, "openai", attr(s, "gen_ai.provider.name").AsString())
			require.Equal(t, "chat", attr(s, "gen_ai.operation.name").AsString())
			require.Equal(t, int64(512), attr(s, "gen_ai.request.max_tokens").AsInt64())
		}
	}
	require.Len(t, chats, 4)
	ok := chats[0]
	require.Equal(t, "gpt-x-2026", attr(ok, "gen_ai.response.model").AsString())
	require.Equal(t, int64(11), attr(ok, "gen_ai.usage.input_tokens").AsInt64())
	require.Equal(t, int64(7), attr(ok, "gen_ai.usage.output_tokens").AsInt64())
	require.Equal(t, []string{"stop"}, attr(ok, "gen_ai.response.finish_reasons").AsStringSlice())
	require.Equal(t, codes.Unset, ok.Status.Code)
	for j, want := range []string{"429", "timeout", "_OTHER"} {
		s := chats[j+1]
		require.Equal(t, codes.Error, s.Status.Code)
		require.Equal(t, want, attr(s, "error.type").AsString())
	}
}

// Off, the tracer hands back what it wraps and records nothing; the nil
// Tracer is off.
func TestTracingOff(t *testing.T) {
	t.Setenv(EnvEndpoint, "")
	t.Setenv(EnvTracesEndpoint, "")
	t.Setenv(EnvExporter, "")
	tr, err := FromEnv(context.Background(), "test")
	require.NoError(t, err)
	require.False(t, tr.Enabled())
	m := modelFunc(func(context.Context, agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
		return agentfleet.ModelResponse{}, nil
	})
	_, isFunc := tr.Model(m, "openai").(modelFunc)
	require.True(t, isFunc, "the model is not wrapped")
	var nilTracer *Tracer
	ctx, end := nilTracer.StartTurn(context.Background(), agentfleet.Run{ID: "r"}, 1, "")
	end("ack", nil)
	require.Empty(t, nilTracer.Traceparent(ctx))
	nilTracer.EndRun(ctx, agentfleet.Run{})
	require.NoError(t, nilTracer.Shutdown(ctx))

	t.Setenv(EnvExporter, "zipkin")
	_, err = FromEnv(context.Background(), "test")
	require.ErrorContains(t, err, "OTLP only")
	t.Setenv(EnvExporter, "otlp")
	t.Setenv(EnvProtocol, "http/json")
	_, err = FromEnv(context.Background(), "test")
	require.ErrorContains(t, err, "use http/protobuf or grpc")
}
