package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// echoServer answers every request with what it received, as JSON.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo", "yes")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.RequestURI(), "body": string(body),
			"ctype": r.Header.Get("Content-Type"), "auth": r.Header.Get("Authorization"),
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFetch(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	res := run(t, p, `function run(args) {
  const r = fetch(args.url + "/a?b=1", {method: "post", headers: {Authorization: "Bearer t"}, body: {x: 1}});
  return {status: r.status, echo: r.json(), hdr: r.headers["x-echo"], url: r.url, truncated: r.truncated === true};
}`, `{"url":"`+srv.URL+`"}`)
	var got struct {
		Status int `json:"status"`
		Echo   struct {
			Method, Path, Body, Ctype, Auth string
		} `json:"echo"`
		Hdr       string `json:"hdr"`
		URL       string `json:"url"`
		Truncated bool   `json:"truncated"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, res)), &got))
	require.Equal(t, 201, got.Status)
	require.Equal(t, "POST", got.Echo.Method)
	require.Equal(t, "/a?b=1", got.Echo.Path)
	require.JSONEq(t, `{"x":1}`, got.Echo.Body)
	require.Equal(t, "application/json", got.Echo.Ctype, "object bodies are sent as JSON")
	require.Equal(t, "Bearer t", got.Echo.Auth)
	require.Equal(t, "yes", got.Hdr)
	require.Equal(t, srv.URL+"/a?b=1", got.URL)
	require.False(t, got.Truncated)
}

func TestHTTPModule(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	res := run(t, p, `function run(args) {
  const http = require("http");
  const out = [];
  out.push(http.get(args.url + "/g").json());
  out.push(http.post(args.url + "/p", "raw text", {headers: {"Content-Type": "text/plain"}}).json());
  out.push(http.put(args.url + "/u", {y: 2}).json());
  out.push(http.del(args.url + "/d").json());
  return out.map(e => e.method + " " + e.path + " " + e.body + " " + e.ctype);
}`, `{"url":"`+srv.URL+`"}`)
	require.JSONEq(t, `["GET /g  ","POST /p raw text text/plain","PUT /u {\"y\":2} application/json","DELETE /d  "]`, ok(t, res))
}

func TestAI(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []agentfleet.AIRequest
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		mu.Lock()
		reqs = append(reqs, req)
		mu.Unlock()
		if req.JSON {
			return agentfleet.AIResponse{Content: "```json\n{\"sentiment\": \"positive\", \"score\": 0.9}\n```", Usage: agentfleet.Usage{PromptTokens: 20, CompletionTokens: 7}}, nil
		}
		return agentfleet.AIResponse{Content: "summary of " + req.Prompt, Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}}, nil
	}
	p := sharedPool(t)
	res := execute(t, p, agentfleet.ExecRequest{AI: ai, Script: `function run() {
  const s = ai("doc");
  const j = aiJSON("classify", {type: "object", properties: {sentiment: {type: "string"}}});
  return {s, sentiment: j.sentiment, score: j.score};
}`})
	require.JSONEq(t, `{"s":"summary of doc","sentiment":"positive","score":0.9}`, ok(t, res))
	require.Equal(t, agentfleet.Usage{PromptTokens: 30, CompletionTokens: 12}, res.AIUsage)
	require.Len(t, reqs, 2)
	require.Equal(t, "doc", reqs[0].Prompt)
	require.False(t, reqs[0].JSON)
	require.True(t, reqs[1].JSON)
	require.JSONEq(t, `{"type":"object","properties":{"sentiment":{"type":"string"}}}`, string(reqs[1].Schema))

	// Invalid JSON from the model is an error the script can see.
	bad := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		return agentfleet.AIResponse{Content: "sure! here it is", Usage: agentfleet.Usage{PromptTokens: 1}}, nil
	}
	res = execute(t, p, agentfleet.ExecRequest{AI: bad, Script: `function run() { return aiJSON("x") }`})
	require.Contains(t, failed(t, res, agentfleet.ScriptException), "not valid JSON")
	require.Equal(t, int64(1), res.AIUsage.PromptTokens, "usage is reported even when the reply is unusable")

	// No AIFunc: a clear error.
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { return ai("x") }`})
	require.Contains(t, failed(t, res, agentfleet.ScriptException), "ai() is not available")
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	var mu sync.Mutex
	var calls []Call
	policy := PolicyFunc(func(ctx context.Context, c Call) (Decision, string) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		switch {
		case c.Primitive == "ai":
			return NeedsApproval, "model calls cost money"
		case strings.Contains(string(c.Args), "/forbidden"):
			return Deny, "that path is off limits"
		}
		return Allow, ""
	})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		t.Error("ai called despite NeedsApproval")
		return agentfleet.AIResponse{}, nil
	}
	p := newPool(t, Config{PoolSize: 1, Policy: policy, Network: NetworkConfig{Allow: loopback}})
	args := `{"url":"` + srv.URL + `"}`

	// Uncaught denial: kind denied.
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run(a) { fetch(a.url + "/forbidden", {body: "secret body"}) }`, Args: []byte(args), Tenant: "acme", RunID: "run-7"})
	require.Contains(t, failed(t, res, agentfleet.ScriptDenied), "fetch denied by policy: that path is off limits")

	// Caught denial: the script carries on.
	res = run(t, p, `function run(a) { try { fetch(a.url + "/forbidden") } catch (e) { return e.name + " | " + e.message } }`, args)
	require.Equal(t, `"PolicyError | fetch denied by policy: that path is off limits"`, ok(t, res))

	// NeedsApproval without a way to ask (no ExecRequest.Approval) is a
	// denial.
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { return ai("x") }`, AI: ai})
	require.Contains(t, failed(t, res, agentfleet.ScriptDenied), "ai needs approval (model calls cost money), and this run cannot ask for one")

	// Allowed calls pass exactly one check each.
	before := len(calls)
	ok(t, run(t, p, `function run(a) { fetch(a.url + "/ok"); require("http").get(a.url + "/ok2") }`, args))
	require.Len(t, calls, before+2)

	first := calls[0]
	require.Equal(t, "fetch", first.Primitive)
	require.Equal(t, "acme", first.Tenant)
	require.Equal(t, "run-7", first.RunID)
	require.JSONEq(t, `{"method":"GET","url":"`+srv.URL+`/forbidden"}`, string(first.Args), "the body is not shown to the policy")
	require.Equal(t, "http", calls[len(calls)-1].Primitive)
}

func TestPrimitivesEnabled(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	// Only markdown enabled (plus the core): nothing else is defined.
	res := execute(t, p, agentfleet.ExecRequest{Primitives: []string{"markdown"}, Script: `function run() {
  return [typeof log, typeof answer, typeof console, typeof fetch, typeof ai, typeof aiJSON, typeof parseUrl, typeof htmlToMarkdown, typeof require];
}`})
	require.JSONEq(t, `["function","function","object","undefined","undefined","undefined","undefined","undefined","function"]`, ok(t, res))

	res = execute(t, p, agentfleet.ExecRequest{Primitives: []string{"markdown"}, Script: `function run() { require("http") }`})
	require.Contains(t, failed(t, res, agentfleet.ScriptException), `unknown module "http"; available modules: markdown`)

	res = execute(t, p, agentfleet.ExecRequest{Primitives: []string{"markdown"}, Script: `function run() { fetch("https://example.com") }`})
	msg := failed(t, res, agentfleet.ScriptException)
	require.Contains(t, msg, "ReferenceError: fetch is not defined")
	require.Contains(t, msg, "not enabled for this agent")

	res = execute(t, p, agentfleet.ExecRequest{Primitives: []string{}, Script: `function run() { return typeof require }`})
	require.Equal(t, `"undefined"`, ok(t, res))

	// Unknown modules name the known ones.
	res = run(t, p, `function run() { require("fs") }`, "")
	require.Contains(t, failed(t, res, agentfleet.ScriptException), `unknown module "fs"; available modules: http, markdown`)
}

func TestHelpLogsDeclarations(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := execute(t, p, agentfleet.ExecRequest{Primitives: []string{"parseUrl"}, Script: `function run() { help() }`})
	ok(t, res)
	require.Equal(t, p.Declarations([]string{"parseUrl"}, false), res.Logs)
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := run(t, p, `function run() { return parseUrl("HTTPS://user@Example.com:8443/a/b%20c?q=1&x=y&q=2#frag") }`, "")
	require.JSONEq(t, `{"protocol":"https:","host":"Example.com:8443","hostname":"Example.com","port":"8443",
		"pathname":"/a/b%20c","search":"?q=1&x=y&q=2","hash":"#frag","query":{"q":"1","x":"y"}}`, ok(t, res))
	res = run(t, p, `function run() { return parseUrl("https://example.com").pathname }`, "")
	require.Equal(t, `"/"`, ok(t, res))
	res = run(t, p, `function run() { parseUrl("http://[::1") }`, "")
	require.Contains(t, failed(t, res, agentfleet.ScriptException), "TypeError: parseUrl: invalid URL")
}

func TestMarkdownPrimitives(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := run(t, p, `function run() {
  const md = require("markdown");
  const doc = htmlToMarkdown("<h1>Title</h1><p>See <a href='https://x.dev/a'>the docs</a>.</p><script>alert(1)</script>");
  return {doc, headings: md.headings(doc), links: md.links(doc), sections: md.sections(doc), text: md.text(doc)};
}`, "")
	require.JSONEq(t, `{
		"doc": "# Title\n\nSee [the docs](https://x.dev/a).\n",
		"headings": [{"level":1,"text":"Title"}],
		"links": [{"text":"the docs","url":"https://x.dev/a"}],
		"sections": [{"heading":"Title","level":1,"body":"See [the docs](https://x.dev/a)."}],
		"text": "Title\n\nSee the docs."}`, ok(t, res))
}
