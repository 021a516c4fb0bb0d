package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// parked is a run of tenant key's, started and parked on an http.post
// of its first turn, as a worker would park it.
func (e *env) parked(key string, body map[string]any) (agentfleet.Run, store.Approval) {
	e.t.Helper()
	run := e.createRun(key, body)
	_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusRunning})
	require.NoError(e.t, err)
	res, err := e.store.ApprovalRequest(e.ctx, store.ApprovalRequestParams{RunID: run.ID, Turn: 1,
		Call: agentfleet.ApprovalCall{Index: 1, Primitive: "http", Method: "POST", URL: "https://api.example.com/pay", Preview: `{"amount":5}`}})
	require.NoError(e.t, err)
	require.True(e.t, res.Parked)
	return res.Change.Run, res.Approval
}

func TestApprovalsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme, other := e.tenant("acme"), e.tenant("other")
	run, a := e.parked(acme, map[string]any{"message": "pay"})

	list := decode[wire.ApprovalList](t, e.do("GET", "/v1/approvals?status=pending", acme, nil), http.StatusOK)
	require.Len(t, list.Approvals, 1)
	v := list.Approvals[0]
	require.Equal(t, a.ID, v.ID)
	require.Equal(t, run.ID, v.RunID)
	require.Equal(t, 1, v.CallIndex)
	require.Equal(t, "https://api.example.com/pay", v.URL)
	require.Equal(t, "pending", v.Status)
	require.Nil(t, v.DecidedAt)
	require.Empty(t, decode[wire.ApprovalList](t, e.do("GET", "/v1/approvals", other, nil), http.StatusOK).Approvals, "another tenant's are not listed")
	require.Len(t, decode[wire.ApprovalList](t, e.do("GET", "/v1/approvals?tenant=acme", adminToken, nil), http.StatusOK).Approvals, 1)
	require.Equal(t, v, decode[wire.ApprovalView](t, e.do("GET", "/v1/approvals/"+a.ID, acme, nil), http.StatusOK))

	for name, c := range map[string]struct {
		method, path, key string
		body              any
		status            int
	}{
		"bad status":        {"GET", "/v1/approvals?status=maybe", acme, nil, http.StatusBadRequest},
		"bad limit":         {"GET", "/v1/approvals?limit=0", acme, nil, http.StatusBadRequest},
		"bad cursor":        {"GET", "/v1/approvals?cursor=zzz", acme, nil, http.StatusBadRequest},
		"no token":          {"GET", "/v1/approvals", "", nil, http.StatusUnauthorized},
		"unknown":           {"POST", "/v1/approvals/nope/approve", acme, nil, http.StatusNotFound},
		"another tenant's":  {"POST", "/v1/approvals/" + a.ID + "/approve", other, nil, http.StatusNotFound},
		"another's read":    {"GET", "/v1/approvals/" + a.ID, other, nil, http.StatusNotFound},
		"malformed":         {"POST", "/v1/approvals/" + a.ID + "/deny", acme, `{"reason":`, http.StatusBadRequest},
		"unknown field":     {"POST", "/v1/approvals/" + a.ID + "/deny", acme, map[string]any{"why": "x"}, http.StatusBadRequest},
		"scope":             {"POST", "/v1/approvals/" + a.ID + "/approve", acme, map[string]any{"scope": "forever"}, http.StatusUnprocessableEntity},
		"deny for session":  {"POST", "/v1/approvals/" + a.ID + "/deny", acme, map[string]any{"scope": "session"}, http.StatusUnprocessableEntity},
		"no session to use": {"POST", "/v1/approvals/" + a.ID + "/approve", acme, map[string]any{"scope": "session"}, http.StatusUnprocessableEntity},
	} {
		r := e.do(c.method, c.path, c.key, c.body)
		require.Equal(t, c.status, r.status, "%s: %s", name, r)
	}
	require.Equal(t, "pending", decode[wire.ApprovalView](t, e.do("GET", "/v1/approvals/"+a.ID, acme, nil), http.StatusOK).Status, "nothing was decided")

	// Approve: decided by the key's name; the run resumes and its turn
	// is queued again, marked so that it reuses its recorded reply.
	got := decode[wire.ApprovalView](t, e.do("POST", "/v1/approvals/"+a.ID+"/approve", acme, map[string]any{"reason": "ok"}), http.StatusOK)
	require.Equal(t, "approved", got.Status)
	require.Equal(t, "default", got.DecidedBy)
	require.Equal(t, "ok", got.Reason)
	require.NotNil(t, got.DecidedAt)
	e.nextTurn() // the first turn, from the submission
	turn := e.nextTurn()
	require.Equal(t, run.ID, turn.RunID)
	require.Equal(t, 1, turn.Turn)
	require.Equal(t, run.Wake+1, turn.Wake)
	require.True(t, turn.Retried)
	require.Equal(t, agentfleet.StatusRunning, e.getRun(acme, run.ID).Status)
	r := e.do("POST", "/v1/approvals/"+a.ID+"/deny", acme, nil)
	require.Equal(t, http.StatusConflict, r.status, "deciding twice: %s", r)

	// The admin decides for any tenant, with an empty body.
	_, b := e.parked(acme, map[string]any{"message": "pay again"})
	got = decode[wire.ApprovalView](t, e.do("POST", "/v1/approvals/"+b.ID+"/deny", adminToken, nil), http.StatusOK)
	require.Equal(t, "denied", got.Status)
	require.Equal(t, "admin", got.DecidedBy)
}

// A batch run resumed by a decision keeps its batch class: its turn goes
// back to the scheduler marked as a batch turn, behind the tenant's
// interactive ones.
func TestApprovalResumesABatchRunAsABatchTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.tenant("acme")
	b := e.submitBatch(acme, "", jsonl(1), http.StatusAccepted)
	run := e.batchRuns(b.ID)[0].Run
	require.True(t, e.nextTurn().Batch, "the admitted turn")
	_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: run.ID, To: agentfleet.StatusRunning})
	require.NoError(t, err)
	res, err := e.store.ApprovalRequest(e.ctx, store.ApprovalRequestParams{RunID: run.ID, Turn: 1,
		Call: agentfleet.ApprovalCall{Index: 0, Primitive: "fetch", Method: "POST", URL: "https://api.example.com/pay"}})
	require.NoError(t, err)
	require.True(t, res.Parked)

	decode[wire.ApprovalView](t, e.do("POST", "/v1/approvals/"+res.Approval.ID+"/approve", acme, nil), http.StatusOK)
	turn := e.nextTurn()
	require.Equal(t, run.ID, turn.RunID)
	require.True(t, turn.Retried)
	require.True(t, turn.Batch, "a batch run's resumed turn is still a batch turn")
}
