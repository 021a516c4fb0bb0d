package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/telemetry"
	"github.com/agentfleet/agentfleet/wire"
)

// subCallThenThreeTurns is threeTurns whose first script also asks the
// model a question with ai().
func subCallThenThreeTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	if strings.HasPrefix(r.FirstUser(), "sub-call") {
		return "42", agentfleet.Usage{PromptTokens: 5, CompletionTokens: 1}, nil
	}
	if assistantTurns(r) == 0 {
		return "Start.\n```javascript\nfunction run(args) { return {n: Number(ai('sub-call: the answer?'))} }\n```", agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}, nil
	}
	return threeTurns(r)
}

// A run on a traced fleet is one trace whose id is the run's: the run's
// invoke_agent span, the dispatcher's admit_run, a span per turn, each turn's model call (chat) and
// script (execute_js) its children, the script's ai() call a child of
// the script, turns chained in order across the workers that ran them.
func TestFleetTracesARunAsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracer := telemetry.New(sdktrace.NewSimpleSpanProcessor(exp), "agentfleet-worker")
	f := setupFleetWith(t, fleetOptions{responder: subCallThenThreeTurns, tracer: tracer})

	run := f.wait(f.submit(wire.RunCreateRequest{Message: "compute 41"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.JSONEq(t, `"result 85"`, string(run.Answer))
	require.Equal(t, 3, run.Turn)

	traceID := telemetry.RunTraceID(run.ID)
	var spans tracetest.SpanStubs
	require.Eventually(t, func() bool {
		spans = nil
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == traceID {
				spans = append(spans, s)
			}
		}
		return len(spans) >= 1+1+3+4+3
	}, 5*time.Second, 10*time.Millisecond, "run, admission, 3 turns, 4 model calls, 3 scripts")

	byName := map[string][]tracetest.SpanStub{}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		byID[s.SpanContext.SpanID()] = s
	}
	require.Len(t, byName["invoke_agent default"], 1)
	runSpan := byName["invoke_agent default"][0]
	require.Len(t, byName["chat fake-model"], 4)
	require.Len(t, byName["execute_js"], 3)
	parentName := func(s tracetest.SpanStub) string { return byID[s.Parent.SpanID()].Name }

	require.Len(t, byName["admit_run"], 1)
	admit := byName["admit_run"][0]
	require.Equal(t, runSpan.SpanContext.SpanID(), admit.Parent.SpanID(), "the dispatcher's admission is the run's child")
	prev := admit
	for i, name := range []string{"turn 1", "turn 2", "turn 3"} {
		require.Len(t, byName[name], 1, name)
		turn := byName[name][0]
		require.Equal(t, prev.SpanContext.SpanID(), turn.Parent.SpanID(), "%s follows %s", name, prev.Name)
		require.Equal(t, i+1, int(attrOf(turn, "agentfleet.turn").AsInt64()))
		require.Equal(t, "acme", attrOf(turn, "agentfleet.tenant").AsString())
		prev = turn
	}
	for _, s := range byName["execute_js"] {
		require.True(t, strings.HasPrefix(parentName(s), "turn "), "a script runs in a turn, not %q", parentName(s))
	}
	subCalls := 0
	for _, s := range byName["chat fake-model"] {
		switch parentName(s) {
		case "execute_js":
			subCalls++
			require.Equal(t, int64(5), attrOf(s, "gen_ai.usage.input_tokens").AsInt64())
		case "turn 1", "turn 2", "turn 3":
		default:
			t.Fatalf("a model call under %q", parentName(s))
		}
		require.Equal(t, "openai", attrOf(s, "gen_ai.provider.name").AsString())
		require.Equal(t, trace.SpanKindClient, s.SpanKind)
	}
	require.Equal(t, 1, subCalls, "the ai() call is the script's child")
	require.Equal(t, "completed", attrOf(runSpan, "agentfleet.run.status").AsString())
	require.Equal(t, run.Usage.PromptTokens, attrOf(runSpan, "gen_ai.usage.input_tokens").AsInt64())
	require.False(t, runSpan.StartTime.After(byName["turn 1"][0].StartTime), "the run's span starts at its creation")
}

func attrOf(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
