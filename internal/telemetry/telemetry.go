// Package telemetry owns tracing: OpenTelemetry spans following the GenAI
// semantic conventions, a span per run, per turn, per model call and per
// script execution, exported over OTLP when the standard environment asks
// for it (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER). It is the
// only importer of the OpenTelemetry packages; the rest of the fleet sees
// a *Tracer whose methods do nothing when tracing is off.
//
// One run is one trace across every process: its trace id and the id of
// its span derive from the run's id, so a worker starting turn 7 a day
// after turn 6 joins the same trace without anyone holding a span open.
// The run's own span is emitted when the run ends, starting at its
// creation. Turn messages carry the W3C traceparent of the turn that sent
// them (a NATS header), so a turn's span follows the one before it.
package telemetry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentfleet/agentfleet"
)

// Tracer starts and ends the fleet's spans. The nil *Tracer, and one
// built with tracing off, do nothing and cost a nil check.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Enabled reports whether t records spans.
func (t *Tracer) Enabled() bool { return t != nil && t.provider != nil }

// Standard environment variables read by FromEnv.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvExporter       = "OTEL_TRACES_EXPORTER"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// FromEnv returns a Tracer exporting over OTLP when the environment asks
// for traces: an OTLP endpoint is set, or OTEL_TRACES_EXPORTER is "otlp".
// OTEL_TRACES_EXPORTER=none turns it off. The protocol is
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: http/protobuf (the specification's
// default) or grpc; the exporters read the endpoint, headers and TLS
// settings from the environment themselves. service names the process
// (service.name), unless OTEL_SERVICE_NAME does.
func FromEnv(ctx context.Context, service string) (*Tracer, error) {
	exporter := strings.TrimSpace(os.Getenv(EnvExporter))
	endpoint := os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != ""
	switch {
	case exporter == "none", exporter == "" && !endpoint:
		return &Tracer{}, nil
	case exporter != "" && exporter != "otlp":
		return nil, fmt.Errorf("%s=%q: this build exports traces over OTLP only (otlp, or none)", EnvExporter, exporter)
	}
	protocol := cmpOr(os.Getenv(EnvTracesProtocol), os.Getenv(EnvProtocol), "http/protobuf")
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: use http/protobuf or grpc", EnvProtocol, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return New(sdktrace.NewBatchSpanProcessor(exp), service), nil
}

// New returns a Tracer whose spans go to processor (tests pass a simple
// processor over tracetest's in-memory exporter).
func New(processor sdktrace.SpanProcessor, service string) *Tracer {
	res, _ := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", cmpOr(os.Getenv("OTEL_SERVICE_NAME"), service))))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(processor), sdktrace.WithResource(res), sdktrace.WithIDGenerator(ids{}))
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/agentfleet/agentfleet")}
}

// Shutdown flushes what is buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// RunTraceID is the trace id of a run: its id's 16 bytes when the id is a
// UUID (as the store makes them), a digest of it otherwise.
func RunTraceID(runID string) trace.TraceID {
	var id trace.TraceID
	if b, err := hex.DecodeString(strings.ReplaceAll(runID, "-", "")); err == nil && len(b) == 16 {
		copy(id[:], b)
		return id
	}
	sum := sha256.Sum256([]byte(runID))
	copy(id[:], sum[:16])
	return id
}

// runSpanID is the id of a run's own span.
func runSpanID(runID string) trace.SpanID {
	sum := sha256.Sum256([]byte("run span " + runID))
	var id trace.SpanID
	copy(id[:], sum[:8])
	return id
}

// runParent is the run's span as the parent of its turns.
func runParent(runID string) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: RunTraceID(runID), SpanID: runSpanID(runID), TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

// StartTurn starts the span of turn of run: a child of the turn that sent
// its message (traceparent, from the message's header) when there is one,
// else of the run's span. end records the turn's outcome.
func (t *Tracer) StartTurn(ctx context.Context, run agentfleet.Run, turn int, traceparent string) (context.Context, func(outcome string, err error)) {
	if !t.Enabled() {
		return ctx, func(string, error) {}
	}
	parent, ok := parseTraceparent(traceparent)
	if !ok || parent.TraceID() != RunTraceID(run.ID) {
		parent = runParent(run.ID)
	}
	ctx, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), fmt.Sprintf("turn %d", turn),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(runAttrs(run)...), trace.WithAttributes(attribute.Int("agentfleet.turn", turn)))
	return ctx, func(outcome string, err error) {
		span.SetAttributes(attribute.String("agentfleet.turn.outcome", outcome))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Admitted emits the dispatcher's span of a run it admitted (a child of
// the run's span) and returns its traceparent for the first turn's
// message, so the first turn follows it; "" when tracing is off.
func (t *Tracer) Admitted(ctx context.Context, run agentfleet.Run) string {
	if !t.Enabled() {
		return ""
	}
	ctx, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(context.WithoutCancel(ctx), runParent(run.ID)), "admit_run",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(runAttrs(run)...))
	span.End()
	return Traceparent(ctx)
}

// EndRun emits the span of a run that ended: from its creation to now,
// with its outcome and usage, as the GenAI conventions' invoke_agent.
func (t *Tracer) EndRun(ctx context.Context, run agentfleet.Run) {
	if !t.Enabled() {
		return
	}
	ctx = context.WithValue(ctx, forcedKey{}, forced{trace: RunTraceID(run.ID), span: runSpanID(run.ID)})
	_, span := t.tracer.Start(ctx, "invoke_agent "+run.Agent, trace.WithNewRoot(), trace.WithTimestamp(run.CreatedAt),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(runAttrs(run)...),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.name", run.Agent),
			attribute.String("agentfleet.run.status", string(run.Status)),
			attribute.Int("agentfleet.run.turns", run.Turn),
			attribute.Int64("gen_ai.usage.input_tokens", run.Usage.PromptTokens),
			attribute.Int64("gen_ai.usage.output_tokens", run.Usage.CompletionTokens),
		))
	if run.Status != agentfleet.StatusCompleted {
		span.SetStatus(codes.Error, cmpOr(run.Error, string(run.Status)))
	}
	span.End(trace.WithTimestamp(time.Now()))
}

func runAttrs(run agentfleet.Run) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("agentfleet.run.id", run.ID),
		attribute.String("agentfleet.tenant", run.Tenant),
		attribute.String("gen_ai.agent.name", run.Agent),
	}
	if run.SessionID != "" {
		attrs = append(attrs, attribute.String("gen_ai.conversation.id", run.SessionID))
	}
	if run.ParentRunID != "" {
		attrs = append(attrs, attribute.String("agentfleet.run.parent_id", run.ParentRunID))
	}
	return attrs
}

// Traceparent is the W3C traceparent of the span in ctx, for the next
// turn's message; "" when there is none or tracing is off.
func (t *Tracer) Traceparent(ctx context.Context) string {
	if !t.Enabled() {
		return ""
	}
	return Traceparent(ctx)
}

// Traceparent is the W3C traceparent of the span in ctx; "" when there is
// none.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

func parseTraceparent(s string) (trace.SpanContext, bool) {
	parts := strings.Split(s, "-")
	if len(parts) != 4 || parts[0] != "00" {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(parts[1])
	sid, err2 := trace.SpanIDFromHex(parts[2])
	flags, err3 := hex.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || len(flags) != 1 {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}

// ids makes span ids at random, except for a run's own span, whose ids
// EndRun forces through the context.
type ids struct{}

type forcedKey struct{}

type forced struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(forcedKey{}).(forced); ok {
		return f.trace, f.span
	}
	var tid trace.TraceID
	randomFill(tid[:])
	return tid, ids{}.NewSpanID(ctx, tid)
}

func (ids) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	randomFill(sid[:])
	return sid
}

func randomFill(b []byte) {
	_, _ = rand.Read(b)
	if binary.BigEndian.Uint64(b[:8]) == 0 {
		b[0] = 1 // all zeros is the invalid id
	}
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
