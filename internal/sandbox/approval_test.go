package sandbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

func TestApproveRules(t *testing.T) {
	t.Parallel()
	type call struct{ prim, method, url string }
	post := call{"http", "POST", "https://api.example.com/v1/charges"}
	get := call{"http", "GET", "https://api.example.com/v1/charges"}
	fetchPost := call{"fetch", "POST", "https://hooks.internal/x"}
	spawn := call{"spawn", "", ""}
	ai := call{"ai", "", ""}
	for _, tc := range []struct {
		rule  string
		match []call
		miss  []call
	}{
		{"*", []call{post, get, fetchPost, spawn, ai}, nil},
		{"http.post", []call{post}, []call{get, fetchPost, spawn}},
		{"http.del", []call{{"http", "DELETE", "https://x/y"}}, []call{post}},
		{"fetch:POST", []call{fetchPost}, []call{post, get}},
		{"fetch:post", []call{fetchPost}, []call{post}},
		{"http", []call{post, get}, []call{fetchPost}},
		{"spawn", []call{spawn}, []call{ai, post}},
		{"http.post https://api.example.com/*", []call{post, {"http", "POST", "HTTPS://API.EXAMPLE.COM/v2"}}, []call{get, {"http", "POST", "https://other.example.com/v1"}}},
		{"* https://*.internal/*", []call{fetchPost, {"http", "GET", "https://db.internal/q"}}, []call{post, spawn}},
	} {
		for _, c := range tc.match {
			require.True(t, needsApproval([]string{tc.rule}, c.prim, c.method, c.url), "%q should cover %v", tc.rule, c)
		}
		for _, c := range tc.miss {
			require.False(t, needsApproval([]string{tc.rule}, c.prim, c.method, c.url), "%q should not cover %v", tc.rule, c)
		}
		require.NoError(t, CheckApproveRules([]string{tc.rule}))
	}
	for rule, want := range map[string]string{
		"shell":                 "not a primitive that can need approval",
		"spawn.post":            "only fetch and http calls have a method",
		"http.p0st":             "the method must be letters",
		"http.":                 "the method must be letters",
		"ai https://x/*":        "only fetch and http calls have a URL",
		"http.post https://a b": "at most one URL pattern",
	} {
		err := CheckApproveRules([]string{"http.put", rule})
		require.ErrorContains(t, err, want, rule)
		require.True(t, needsApproval([]string{rule}, "ai", "", ""), "a rule that does not parse covers every call (%q)", rule)
	}
}

// approvals is an ApprovalFunc answering state for every call, and
// remembering what it was asked.
type approvals struct {
	mu     sync.Mutex
	state  agentfleet.ApprovalState
	reason string
	asked  []agentfleet.ApprovalCall
}

func (a *approvals) fn(_ context.Context, c agentfleet.ApprovalCall) (agentfleet.ApprovalState, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, c)
	return a.state, a.reason, nil
}

func TestApprovalParksDecidesAndThrows(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	posts := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, g := range got {
			if strings.HasPrefix(g, "POST") {
				n++
			}
		}
		return n
	}
	// One process: a turn stopped for an approval leaves it fit for the
	// next turn.
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	const secret = "sk-live-123456"
	script := `function run(a) {
  const http = require("http");
  http.get(a.url + "/read");
  log("before the post");
  try {
    const r = http.post(a.url + "/charge", {amount: 5, key: "` + secret + `", pad: "` + strings.Repeat("x", 2000) + `"});
    return {status: r.status};
  } catch (e) {
    return {caught: e.name + ": " + e.message};
  } finally {
    log("finally ran");
  }
}`
	req := func(a *approvals) agentfleet.ExecRequest {
		return agentfleet.ExecRequest{Script: script, Args: []byte(`{"url":"` + srv.URL + `"}`), Approve: []string{"http.post"},
			Approval: a.fn, Secrets: []string{secret}, Turn: 3}
	}

	// Pending: the turn stops at the post, uncatchably (no catch, no
	// finally), and says what it waits for.
	pending := &approvals{state: agentfleet.ApprovalPending}
	res := execute(t, p, req(pending))
	require.Nil(t, res.Err)
	require.NotNil(t, res.Approval)
	require.Equal(t, 1, res.Approval.Index, "the second host call of the turn")
	require.Equal(t, "http", res.Approval.Primitive)
	require.Equal(t, "POST", res.Approval.Method)
	require.Equal(t, srv.URL+"/charge", res.Approval.URL)
	require.Contains(t, res.Approval.Preview, `"amount":5`)
	require.Contains(t, res.Approval.Preview, "[redacted]")
	require.NotContains(t, res.Approval.Preview, secret)
	require.LessOrEqual(t, len(res.Approval.Preview), ApprovalPreviewMaxBytes+len("…"))
	require.Contains(t, res.Logs, "before the post")
	require.NotContains(t, res.Logs, "finally ran")
	require.JSONEq(t, `null`, string(res.Return))
	require.Len(t, pending.asked, 1, "only the call a rule covers asks")
	require.Equal(t, *res.Approval, pending.asked[0])
	require.Zero(t, posts(), "a call waiting for approval does not go out")

	// Approved: the same call, at the same index, goes out.
	approved := &approvals{state: agentfleet.ApprovalApproved}
	res = execute(t, p, req(approved))
	require.JSONEq(t, `{"status":200}`, ok(t, res))
	require.Nil(t, res.Approval)
	require.Equal(t, 1, approved.asked[0].Index)
	require.Equal(t, 1, posts())

	// Denied: a PolicyError with the reason, which the script may catch...
	denied := &approvals{state: agentfleet.ApprovalDenied, reason: "not this month"}
	res = execute(t, p, req(denied))
	require.JSONEq(t, `{"caught":"PolicyError: http POST `+srv.URL+`/charge was denied: not this month"}`, ok(t, res))
	require.Contains(t, res.Logs, "finally ran")
	// ... and that fails the turn as denied when it does not.
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run(a) { require("http").del(a.url + "/x") }`,
		Args: []byte(`{"url":"` + srv.URL + `"}`), Approve: []string{"http.del"}, Approval: denied.fn})
	require.Contains(t, failed(t, res, agentfleet.ScriptDenied), "http DELETE "+srv.URL+"/x was denied: not this month")
	require.Equal(t, 1, posts())

	// A spawn and an ai() call can need approval too; their preview is
	// the message and the prompt.
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { spawn({message: "deploy to prod"}) }`, Approve: []string{"*"},
		Approval: pending.fn, Spawn: func(context.Context, int, agentfleet.SpawnRequest) (string, error) {
			t.Error("spawn ran while waiting for approval")
			return "", nil
		}})
	require.Equal(t, agentfleet.ApprovalCall{Index: 0, Primitive: "spawn", Preview: "deploy to prod"}, *res.Approval)
}

func TestPolicyNeedsApprovalAsksToo(t *testing.T) {
	t.Parallel()
	policy := PolicyFunc(func(_ context.Context, c Call) (Decision, string) {
		if c.Primitive == "ai" {
			return NeedsApproval, "model calls cost money"
		}
		return Allow, ""
	})
	p := newPool(t, Config{PoolSize: 1, Policy: policy})
	a := &approvals{state: agentfleet.ApprovalPending}
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { return ai("hello there") }`, Approval: a.fn,
		AI: func(context.Context, agentfleet.AIRequest) (agentfleet.AIResponse, error) {
			t.Error("ai called while waiting for approval")
			return agentfleet.AIResponse{}, nil
		}})
	require.Equal(t, agentfleet.ApprovalCall{Index: 0, Primitive: "ai", Preview: "hello there"}, *res.Approval)
}
