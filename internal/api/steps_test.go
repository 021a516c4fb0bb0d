package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestRunSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	other := e.tenant("globex")
	run := e.createRun(key, map[string]any{"message": "order a pizza"})
	e.start(run.ID)
	for _, j := range []agentfleet.JournalEntry{
		{RunID: run.ID, Turn: 1, Index: 0, Primitive: "http", Method: "POST", URL: "https://pizza.example/orders", Result: json.RawMessage(`{"status":201}`)},
		{RunID: run.ID, Turn: 1, Index: 1, Primitive: "ai", Result: json.RawMessage(`"yes"`), Usage: agentfleet.Usage{PromptTokens: 9, CompletionTokens: 1}},
	} {
		_, err := e.store.JournalRecord(e.ctx, store.JournalRecordParams{JournalEntry: j})
		require.NoError(t, err)
	}
	_, err := e.store.TurnCommit(e.ctx, store.TurnCommitParams{RunID: run.ID, Turn: 1, Status: agentfleet.StatusCompleted, Answer: json.RawMessage(`"ordered"`),
		Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: "```javascript ...```"}, {Kind: agentfleet.StepObservation, Content: "answered"}}})
	require.NoError(t, err)

	got := decode[wire.RunSteps](t, e.do("GET", "/v1/runs/"+run.ID+"/steps", key, nil), http.StatusOK)
	require.Equal(t, run.ID, got.RunID)
	require.Len(t, got.Steps, 3, "the message and turn 1's two steps")
	require.Equal(t, agentfleet.StepUser, got.Steps[0].Kind)
	require.Equal(t, "order a pizza", got.Steps[0].Content)
	require.Len(t, got.Journal, 2)
	require.Equal(t, "POST", got.Journal[0].Method)
	require.JSONEq(t, `{"status":201}`, string(got.Journal[0].Result))
	require.Equal(t, "ai", got.Journal[1].Primitive)
	require.Equal(t, int64(10), got.Journal[1].Usage.Total())

	one := decode[wire.RunSteps](t, e.do("GET", "/v1/runs/"+run.ID+"/steps?turn=0", key, nil), http.StatusOK)
	require.Len(t, one.Steps, 1)
	require.NotNil(t, one.Journal)
	require.Empty(t, one.Journal, "turn 0 is the message: no script, no journal")
	one = decode[wire.RunSteps](t, e.do("GET", "/v1/runs/"+run.ID+"/steps?turn=1", key, nil), http.StatusOK)
	require.Len(t, one.Steps, 2)
	require.Len(t, one.Journal, 2)

	admin := decode[wire.RunSteps](t, e.do("GET", "/v1/runs/"+run.ID+"/steps", adminToken, nil), http.StatusOK)
	require.Len(t, admin.Journal, 2, "the admin sees every tenant's runs")
	requireError(t, e.do("GET", "/v1/runs/"+run.ID+"/steps", other, nil), http.StatusNotFound, "not_found", run.ID)
	requireError(t, e.do("GET", "/v1/runs/"+run.ID+"/steps?turn=x", key, nil), http.StatusBadRequest, "bad_request", `turn "x"`)
	requireError(t, e.do("GET", "/v1/runs/"+run.ID+"/steps?turn=-1", key, nil), http.StatusBadRequest, "bad_request", `turn "-1"`)
	requireError(t, e.do("GET", "/v1/runs/nope/steps", key, nil), http.StatusNotFound, "not_found")
}
