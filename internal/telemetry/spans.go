package telemetry

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

// Model is the part of a model client a model call's span wraps.
type Model interface {
	Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error)
}

// Model wraps m so that each call is a span, child of the span in its
// context (the turn's, or the script's for an ai() sub-call), named and
// attributed as the GenAI conventions' chat operation. With tracing off
// it returns m itself.
func (t *Tracer) Model(m Model, provider string) Model {
	if !t.Enabled() {
		return m
	}
	return tracedModel{m: m, t: t, provider: provider}
}

type tracedModel struct {
	m        Model
	t        *Tracer
	provider string
}

func (tm tracedModel) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	return tm.traced(ctx, req, func(ctx context.Context) (agentfleet.ModelResponse, error) { return tm.m.Complete(ctx, req) })
}

// Stream is Complete streamed, when the wrapped model streams (else a
// plain call whose reply arrives as the Done chunk): the span covers the
// whole stream.
func (tm tracedModel) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	return tm.traced(ctx, req, func(ctx context.Context) (agentfleet.ModelResponse, error) {
		if s, ok := tm.m.(streamer); ok {
			return s.Stream(ctx, req, fn)
		}
		resp, err := tm.m.Complete(ctx, req)
		if err == nil && fn != nil {
			err = fn(agentfleet.ModelChunk{Done: true, Response: resp})
		}
		return resp, err
	})
}

type streamer interface {
	Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error)
}

func (tm tracedModel) traced(ctx context.Context, req agentfleet.ModelRequest, call func(context.Context) (agentfleet.ModelResponse, error)) (agentfleet.ModelResponse, error) {
	ctx, span := tm.t.tracer.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", tm.provider),
		attribute.String("gen_ai.request.model", req.Model),
		attribute.Int("gen_ai.request.max_tokens", req.MaxTokens),
	))
	defer span.End()
	resp, err := call(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", errorType(err)))
		return resp, err
	}
	span.SetAttributes(
		attribute.String("gen_ai.response.model", resp.Model),
		attribute.Int64("gen_ai.usage.input_tokens", resp.Usage.PromptTokens),
		attribute.Int64("gen_ai.usage.output_tokens", resp.Usage.CompletionTokens),
	)
	if resp.FinishReason != "" {
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{resp.FinishReason}))
	}
	return resp, nil
}

// errorType names a failed call for error.type: the provider's HTTP
// status when it answered with one, timeout, else _OTHER (the
// conventions' word for a failure with no better name).
func errorType(err error) string {
	switch class, status := llm.ErrorClass(err); {
	case status > 0:
		return strconv.Itoa(status)
	case class == "timeout":
		return "timeout"
	}
	return "_OTHER"
}

// Sandbox is the part of a sandbox a script execution's span wraps.
type Sandbox interface {
	Execute(ctx context.Context, req agentfleet.ExecRequest) (agentfleet.ExecResult, error)
	Declarations(primitives []string, secret bool) string
}

// Sandbox wraps s so that each script execution is a span, child of the
// turn's; with tracing off it returns s itself.
func (t *Tracer) Sandbox(s Sandbox) Sandbox {
	if !t.Enabled() {
		return s
	}
	return tracedSandbox{s: s, t: t}
}

type tracedSandbox struct {
	s Sandbox
	t *Tracer
}

func (ts tracedSandbox) Declarations(primitives []string, secret bool) string {
	return ts.s.Declarations(primitives, secret)
}

// MCPDeclarations passes through to a sandbox that serves MCP servers.
func (ts tracedSandbox) MCPDeclarations(ctx context.Context, req agentfleet.ExecRequest) string {
	if d, ok := ts.s.(interface {
		MCPDeclarations(context.Context, agentfleet.ExecRequest) string
	}); ok {
		return d.MCPDeclarations(ctx, req)
	}
	return ""
}

func (ts tracedSandbox) Execute(ctx context.Context, req agentfleet.ExecRequest) (agentfleet.ExecResult, error) {
	ctx, span := ts.t.tracer.Start(ctx, "execute_js", trace.WithAttributes(
		attribute.String("agentfleet.run.id", req.RunID), attribute.Int("agentfleet.turn", req.Turn),
		attribute.Int("agentfleet.script.bytes", len(req.Script)),
	))
	defer span.End()
	res, err := ts.s.Execute(ctx, req)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case res.Err != nil:
		span.SetAttributes(attribute.String("agentfleet.script.error", string(res.Err.Kind)))
		span.SetStatus(codes.Error, res.Err.Message)
	case res.Answered:
		span.SetAttributes(attribute.Bool("agentfleet.script.answered", true))
	}
	return res, err
}
