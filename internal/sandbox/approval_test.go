package sandbox

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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
	fetchGet := call{"fetch", "GET", "https://hooks.internal/x"}
	spawn := call{"spawn", "", ""}
	ai := call{"ai", "", ""}
	for _, tc := range []struct {
		rule  string
		match []call
		miss  []call
	}{
		{"*", []call{post, get, fetchPost, spawn, ai}, nil},
		// One grammar: http.METHOD and fetch:METHOD name the same
		// requests, made by fetch or by the http module.
		{"http.post", []call{post, fetchPost}, []call{get, fetchGet, spawn}},
		{"fetch:POST", []call{fetchPost, post}, []call{get, fetchGet}},
		{"fetch:post", []call{fetchPost, post}, []call{get}},
		{"fetch.post", []call{fetchPost, post}, []call{get}},
		{"http:POST", []call{fetchPost, post}, []call{get}},
		{"http.del", []call{{"http", "DELETE", "https://x/y"}, {"fetch", "DELETE", "https://x/y"}}, []call{post}},
		{"fetch:DELETE", []call{{"http", "DELETE", "https://x/y"}}, []call{post}},
		{"http.patch", []call{{"fetch", "PATCH", "https://x/y"}}, []call{post}},
		{"http", []call{post, get, fetchPost, fetchGet}, []call{spawn, ai}},
		{"fetch", []call{post, get, fetchPost, fetchGet}, []call{spawn, ai}},
		{"spawn", []call{spawn}, []call{ai, post}},
		{"http.post https://api.example.com/*", []call{post, {"fetch", "POST", "HTTPS://API.EXAMPLE.COM/v2"}}, []call{get, {"http", "POST", "https://other.example.com/v1"}}},
		{"* https://*.internal/*", []call{fetchPost, {"http", "GET", "https://db.internal/q"}}, []call{post, spawn}},
		// A URL is matched in its canonical spelling, and so is the
		// pattern.
		{"fetch:POST http://127.0.0.1:8080/*", []call{
			{"fetch", "POST", "http://127.0.0.1:8080/sink"},
			{"fetch", "POST", "http://127.0.0.1.:8080/sink"},
			{"http", "POST", "http://127.0.0.1:08080/sink"},
			{"fetch", "POST", "HTTP://127.0.0.1:8080/sink"},
		}, []call{{"fetch", "POST", "http://127.0.0.2:8080/sink"}, {"fetch", "POST", "http://127.0.0.1:8081/sink"}}},
		{"fetch:POST http://api.example.com/*", []call{
			{"fetch", "POST", "http://api.example.com:80/sink"},
			{"fetch", "POST", "http://API.Example.COM/sink"},
			{"fetch", "POST", "http://api.example.com./sink"},
		}, []call{{"fetch", "POST", "https://api.example.com/sink"}, {"fetch", "POST", "http://api.example.com:8080/sink"}}},
		{"fetch:POST http://api.example.com:80/*", []call{{"fetch", "POST", "http://api.example.com/sink"}}, nil},
		{"fetch:POST http://h.example/sink", []call{
			{"fetch", "POST", "http://h.example/a/../sink"},
			{"fetch", "POST", "http://h.example/./sink"},
			{"fetch", "POST", "http://h.example/%73ink"},
			{"fetch", "POST", "http://h.example/sink#top"},
		}, []call{{"fetch", "POST", "http://h.example/sink/../other"}}},
		{"http.post http://h.example/~u/*", []call{{"fetch", "POST", "http://h.example/%7Eu/x"}, {"fetch", "POST", "http://h.example/%7eu/x"}}, nil},
		{"http.post http://h.example/%7eu/*", []call{{"fetch", "POST", "http://h.example/~u/x"}}, nil},
		{"http.post https://bücher.example/*", []call{{"fetch", "POST", "https://xn--bcher-kva.example/x"}, {"fetch", "POST", "https://BÜCHER.example/x"}}, nil},
	} {
		for _, c := range tc.match {
			u := canonical(t, c.url)
			require.True(t, needsApproval([]string{tc.rule}, c.prim, c.method, u), "%q should cover %v (%s)", tc.rule, c, u)
		}
		for _, c := range tc.miss {
			u := canonical(t, c.url)
			require.False(t, needsApproval([]string{tc.rule}, c.prim, c.method, u), "%q should not cover %v (%s)", tc.rule, c, u)
		}
		require.NoError(t, CheckApproveRules([]string{tc.rule}))
	}
	for rule, want := range map[string]string{
		"shell":                      "not a primitive that can need approval",
		"spawn.post":                 "only fetch and http calls have a method",
		"http.p0st":                  "the method must be letters",
		"http.":                      "the method must be letters",
		"ai https://x/*":             "only fetch and http calls have a URL",
		"http.post https://a b":      "at most one URL pattern",
		"http.post https://u@a/*":    "cannot have a user name",
		"http.post https://a:0/*":    "not a port number",
		"fetch:POST https://a/%zz/*": "invalid escape",
	} {
		err := CheckApproveRules([]string{"http.put", rule})
		require.ErrorContains(t, err, want, rule)
		require.True(t, needsApproval([]string{rule}, "ai", "", ""), "a rule that does not parse covers every call (%q)", rule)
	}
}

// canonical is raw's canonical URL ("" for "").
func canonical(t *testing.T, raw string) string {
	t.Helper()
	if raw == "" {
		return ""
	}
	u, err := canonicalURL(raw)
	require.NoError(t, err, raw)
	return u
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
	require.Len(t, res.Approval.Digest, 64)
	res.Approval.Digest = ""
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
	require.Len(t, res.Approval.Digest, 64)
	res.Approval.Digest = ""
	require.Equal(t, agentfleet.ApprovalCall{Index: 0, Primitive: "ai", Preview: "hello there"}, *res.Approval)
}

// counter is an HTTP server counting the requests it gets, by method
// and path.
type counter struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]int
}

func newCounter(t *testing.T) *counter {
	c := &counter{got: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.got[r.Method+" "+r.URL.EscapedPath()]++
		c.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) all() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.got)
}

// A URL rule cannot be dodged by spelling: every spelling of a covered
// request asks, whether fetch or the http module makes it; a URL with
// userinfo is refused before any rule or network; approved, the request
// goes out in its canonical spelling.
func TestApprovalRulesMatchTheCanonicalRequest(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	port := c.srv.Listener.Addr().(*net.TCPAddr).Port
	rules := []string{"http.post " + c.srv.URL + "/sink", "fetch:POST http://127.0.0.1:" + strconv.Itoa(port) + "/~pay"}
	post := func(url string, a *approvals) agentfleet.ExecResult {
		return execute(t, p, agentfleet.ExecRequest{
			Script:   `function run(a) { return fetch(a.url, {method: "post", body: "transfer all"}).status }`,
			Args:     []byte(fmt.Sprintf(`{"url":%q}`, url)),
			Approve:  rules,
			Approval: a.fn,
		})
	}
	for url, canon := range map[string]string{
		c.srv.URL + "/sink":                            c.srv.URL + "/sink",
		fmt.Sprintf("http://127.0.0.1.:%d/sink", port): c.srv.URL + "/sink",
		fmt.Sprintf("HTTP://127.0.0.1:%d/sink", port):  c.srv.URL + "/sink",
		fmt.Sprintf("http://127.0.0.1:0%d/sink", port): c.srv.URL + "/sink",
		c.srv.URL + "/a/../sink":                       c.srv.URL + "/sink",
		c.srv.URL + "/./sink?":                         c.srv.URL + "/sink",
		c.srv.URL + "/%73ink#frag":                     c.srv.URL + "/sink",
		c.srv.URL + "/%7epay":                          c.srv.URL + "/~pay",
		c.srv.URL + "/%7Epay":                          c.srv.URL + "/~pay",
	} {
		pending := &approvals{state: agentfleet.ApprovalPending}
		res := post(url, pending)
		require.NotNil(t, res.Approval, "%s parks: %s", url, res.Return)
		require.Equal(t, "fetch", res.Approval.Primitive)
		require.Equal(t, "POST", res.Approval.Method)
		require.Equal(t, canon, res.Approval.URL, url)
	}
	for _, url := range []string{
		fmt.Sprintf("http://u@127.0.0.1:%d/sink", port),
		fmt.Sprintf("http://u:secret@127.0.0.1:%d/elsewhere", port),
	} {
		asked := &approvals{state: agentfleet.ApprovalApproved}
		msg := failed(t, post(url, asked), agentfleet.ScriptDenied)
		require.Contains(t, msg, "a URL with a user name or password (user@host) is refused", url)
		require.NotContains(t, msg, "secret")
		require.Empty(t, asked.asked, "refused before any rule")
	}
	require.Empty(t, c.all(), "nothing went out")

	// Approved, the request goes out once, to the canonical URL.
	res := post(fmt.Sprintf("http://127.0.0.1.:%d/a/b/../../%%7epay", port), &approvals{state: agentfleet.ApprovalApproved})
	require.Equal(t, "201", ok(t, res))
	require.Equal(t, map[string]int{"POST /~pay": 1}, c.all())
	// A request no rule covers goes out too, canonical as well.
	res = post(c.srv.URL+"/x/%2e%2E/other", &approvals{state: agentfleet.ApprovalPending})
	require.Equal(t, "201", ok(t, res))
	require.Equal(t, map[string]int{"POST /~pay": 1, "POST /other": 1}, c.all())
}

// decider approves the calls whose digest it was given and leaves every
// other pending, remembering what it was asked.
type decider struct {
	mu       sync.Mutex
	approved map[string]bool
	asked    []agentfleet.ApprovalCall
}

func (d *decider) fn(_ context.Context, c agentfleet.ApprovalCall) (agentfleet.ApprovalState, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, c)
	if d.approved[c.Digest] {
		return agentfleet.ApprovalApproved, "", nil
	}
	return agentfleet.ApprovalPending, "", nil
}

// An approval binds the exact request: the turn run again with another
// body or header asks about a call of another digest, so what was
// approved is what goes out, and nothing else.
func TestApprovalBindsTheExactRequest(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	d := &decider{approved: map[string]bool{}}
	pay := func(args string) agentfleet.ExecResult {
		return execute(t, p, agentfleet.ExecRequest{
			Script: `function run(a) {
  return require("http").post(a.url + "/pay", "amount=" + a.amount, {headers: a.headers || {}}).status
}`,
			Args:     []byte(strings.ReplaceAll(args, "URL", c.srv.URL)),
			Approve:  []string{"http.post"},
			Approval: d.fn,
			Turn:     2,
		})
	}
	res := pay(`{"url":"URL","amount":10}`)
	require.NotNil(t, res.Approval)
	require.Equal(t, "amount=10", res.Approval.Preview)
	d.approved[res.Approval.Digest] = true

	for _, args := range []string{
		`{"url":"URL","amount":999999}`,
		`{"url":"URL","amount":10,"headers":{"X-Account":"other"}}`,
		`{"url":"URL/../x","amount":10}`,
	} {
		res := pay(args)
		require.NotNil(t, res.Approval, "%s asks again", args)
		require.False(t, d.approved[res.Approval.Digest])
	}
	require.Empty(t, c.all(), "nothing went out but what was approved")

	require.Equal(t, "201", ok(t, pay(`{"url":"URL","amount":10}`)))
	require.Equal(t, map[string]int{"POST /pay": 1}, c.all())
}

func TestRequestDigest(t *testing.T) {
	t.Parallel()
	digest := func(pr prim, args string, keyed bool) string {
		t.Helper()
		if pr == primFetch || pr == primHTTP {
			b, err := canonicalRequest([]byte(args))
			require.NoError(t, err)
			args = string(b)
		}
		return requestDigest(pr, []byte(args), keyed)
	}
	base := digest(primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1"}}`, true)
	require.Len(t, base, 64)
	for name, c := range map[string]struct {
		pr    prim
		args  string
		keyed bool
	}{
		"fetch, the same request":  {primFetch, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1"}}`, true},
		"method case":              {primHTTP, `{"method":"post","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1"}}`, true},
		"URL spelling":             {primHTTP, `{"method":"POST","url":"HTTPS://A.example:443/x/../pay","body":"amount=10","headers":{"X-A":"1"}}`, true},
		"header name case":         {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"x-a":"1"}}`, true},
		"the journal's key aside":  {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1","Idempotency-Key":"k"}}`, true},
		"the journal's key aside2": {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1","idempotency-key":"other"}}`, true},
	} {
		require.Equal(t, base, digest(c.pr, c.args, c.keyed), name)
	}
	for name, c := range map[string]struct {
		pr    prim
		args  string
		keyed bool
	}{
		"body":                 {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=999999","headers":{"X-A":"1"}}`, true},
		"no body":              {primHTTP, `{"method":"POST","url":"https://a.example/pay","headers":{"X-A":"1"}}`, true},
		"header value":         {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"2"}}`, true},
		"header added":         {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1","X-B":"1"}}`, true},
		"no headers":           {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10"}`, true},
		"a JSON body's type":   {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1"},"json":true}`, true},
		"method":               {primHTTP, `{"method":"PUT","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1"}}`, true},
		"URL":                  {primHTTP, `{"method":"POST","url":"https://a.example/pay?to=me","body":"amount=10","headers":{"X-A":"1"}}`, true},
		"a key the script set": {primHTTP, `{"method":"POST","url":"https://a.example/pay","body":"amount=10","headers":{"X-A":"1","Idempotency-Key":"k"}}`, false},
	} {
		require.NotEqual(t, base, digest(c.pr, c.args, c.keyed), name)
	}
	require.Equal(t, digest(primSpawn, `{"message":"deploy","metadata":{"b":"1","a":"2"}}`, false),
		digest(primSpawn, `{"metadata":{"a":"2","b":"1"},"message":"deploy"}`, false), "spawn: what it asks, in canonical JSON")
	require.NotEqual(t, digest(primSpawn, `{"message":"deploy"}`, false), digest(primSpawn, `{"message":"deploy to prod"}`, false))
	require.NotEqual(t, digest(primAI, `{"prompt":"hi"}`, false), digest(primAIJSON, `{"prompt":"hi"}`, false))
	require.NotEqual(t, digest(primAI, `{"prompt":"hi"}`, false), digest(primAI, `{"prompt":"ho"}`, false))
}
