package sandbox

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// billingSpec is a generated OpenAPI document of a billing API at base:
// a GET with a path and a query parameter, a POST with a body, and an
// operation without an operationId.
func billingSpec(base string) json.RawMessage {
	doc := map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "billing", "version": "1"},
		"servers": []any{map[string]any{"url": base}},
		"paths": map[string]any{
			"/invoices/{id}": map[string]any{
				"get": map[string]any{
					"operationId": "getInvoice", "summary": "One invoice",
					"parameters": []any{
						map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}},
						map[string]any{"name": "expand", "in": "query", "schema": map[string]any{"type": "boolean"}},
					},
					"responses": map[string]any{"200": map[string]any{"description": "ok"}},
				},
			},
			"/invoices/{id}/refunds": map[string]any{
				"post": map[string]any{
					"operationId": "createRefund",
					"parameters":  []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}},
					"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
					"responses":   map[string]any{"201": map[string]any{"description": "made"}},
				},
			},
			"/health": map[string]any{
				"get": map[string]any{"responses": map[string]any{"200": map[string]any{"description": "ok"}}},
			},
		},
	}
	b, _ := json.Marshal(doc)
	return b
}

// billingServer records every request: method, path and query, the
// credential header, the idempotency key and the body; it echoes the
// credential header back (as a careless server might).
type billingServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newBillingServer(t *testing.T) *billingServer {
	s := &billingServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, fmt.Sprintf("%s %s key=%s idem=%s body=%s", r.Method, r.URL.RequestURI(), r.Header.Get("X-Api-Key"), r.Header.Get("Idempotency-Key"), body))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "echo": r.Header.Get("X-Api-Key"), "body": string(body)})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *billingServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func billingModule(s *billingServer) agentfleet.OpenAPIModule {
	port := s.Listener.Addr().String()[strings.LastIndexByte(s.Listener.Addr().String(), ':')+1:]
	return agentfleet.OpenAPIModule{Name: "billing", Spec: billingSpec("https://example.com:" + port + "/v1"), Secret: "gh"}
}

const billingScript = `function run(a) {
  const b = require('api:billing');
  const inv = b.getInvoice({id: "in 1", expand: true});
  const ref = b.createRefund({id: "in_1", body: {amount: 5}});
  const h = b.getHealth();
  let missing;
  try { b.createRefund({body: {}}); } catch (e) { missing = e.message; }
  return {inv: inv.status, invPath: inv.json().path, echo: inv.json().echo, ref: ref.status, refBody: ref.json().body, h: h.status, missing};
}`

// An OpenAPI module's operations are HTTP requests made by the parent
// from the document: parameters by name into path, query and body, the
// agent's credential injected at send time (never seen by the script or
// the events), the POST journaled and replayed, and each call told as
// tool_call and tool_result events.
func TestOpenAPIModuleCallsOperations(t *testing.T) {
	t.Parallel()
	srv := newBillingServer(t)
	p := credPool(t, srv.Certificate())
	j := newMemJournal()
	var mu sync.Mutex
	var events []agentfleet.Event
	req := agentfleet.ExecRequest{Script: billingScript, RunID: "run-1", Turn: 2, Journal: j,
		Credentials: credentials(), TenantSecrets: credentials(), OpenAPI: []agentfleet.OpenAPIModule{billingModule(srv)},
		ToolEvent: func(ev agentfleet.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}}
	out := ok(t, execute(t, p, req))
	require.JSONEq(t, `{"inv":200,"invPath":"/v1/invoices/in 1","echo":"token [secret:gh]","ref":201,"refBody":"{\"amount\":5}","h":200,
		"missing":"api:billing.createRefund: parameter \"id\" (path) is required"}`, out)
	key := "token " + credValueSecret
	want := []string{
		"GET /v1/invoices/in%201?expand=true key=" + key + " idem= body=",
		"POST /v1/invoices/in_1/refunds key=" + key + " idem=run-1/2/0 body={\"amount\":5}",
		"GET /v1/health key=" + key + " idem= body=",
	}
	require.Equal(t, want, srv.requests())
	require.Len(t, j.entries, 1, "only the POST is journaled")
	require.Equal(t, "api:billing.createRefund", j.entries[0].Primitive)
	require.Equal(t, "POST", j.entries[0].Method)

	mu.Lock()
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, string(ev.Type)+" "+ev.Summary)
		require.NotContains(t, string(ev.Args), credValueSecret)
		require.NotContains(t, ev.Summary, credValueSecret)
	}
	events = nil
	mu.Unlock()
	require.Len(t, kinds, 6)
	require.True(t, strings.HasPrefix(kinds[2], "tool_call api:billing.createRefund POST https://example.com:"), kinds[2])
	require.Equal(t, "tool_result api:billing.createRefund 201", kinds[3])

	// The turn executed again: the POST is replayed from the journal,
	// not sent again; the GETs are.
	out2 := ok(t, execute(t, p, req))
	require.JSONEq(t, out, out2)
	require.Len(t, srv.requests(), 5)
	require.Equal(t, want[2], srv.requests()[4])
	require.Equal(t, 1, strings.Count(strings.Join(srv.requests(), "\n"), "POST "), "the POST went out once for the turn")
	mu.Lock()
	require.Contains(t, events[3].Summary, "replayed from the journal")
	mu.Unlock()
}

// Approve rules name operations (api:billing.createRefund,
// api:billing.*); fetch rules cover an operation by its method and URL.
func TestOpenAPIApprovals(t *testing.T) {
	t.Parallel()
	srv := newBillingServer(t)
	p := credPool(t, srv.Certificate())
	script := `function run() {
  const b = require('api:billing');
  b.getInvoice({id: "1"});
  return b.createRefund({id: "1", body: {amount: 7}}).status;
}`
	for _, rule := range []string{"api:billing.createRefund", "api:billing.*", "fetch:POST"} {
		pending := &approvals{state: agentfleet.ApprovalPending}
		res := execute(t, p, agentfleet.ExecRequest{Script: script, Turn: 1, Approve: []string{rule}, Approval: pending.fn,
			Credentials: credentials(), OpenAPI: []agentfleet.OpenAPIModule{billingModule(srv)}})
		require.Nil(t, res.Err, rule)
		require.NotNil(t, res.Approval, rule)
		require.Len(t, pending.asked, 1, rule)
		if rule == "api:billing.*" {
			// The GET is covered too, and asks first.
			require.Equal(t, "api:billing.getInvoice", res.Approval.Primitive)
			require.Equal(t, "GET", res.Approval.Method)
			continue
		}
		require.Equal(t, "api:billing.createRefund", res.Approval.Primitive, rule)
		require.Equal(t, "POST", res.Approval.Method)
		require.Contains(t, res.Approval.Preview, `"amount":7`)
	}
	require.NotContains(t, strings.Join(srv.requests(), "\n"), "POST", "nothing waiting for approval went out")

	approved := &approvals{state: agentfleet.ApprovalApproved}
	res := execute(t, p, agentfleet.ExecRequest{Script: script, Turn: 1, Approve: []string{"api:billing.createRefund"}, Approval: approved.fn,
		Credentials: credentials(), OpenAPI: []agentfleet.OpenAPIModule{billingModule(srv)}})
	require.Equal(t, "201", ok(t, res))

	// A rule for another operation or module asks nothing.
	none := &approvals{state: agentfleet.ApprovalPending}
	res = execute(t, p, agentfleet.ExecRequest{Script: script, Turn: 1, Approve: []string{"api:billing.voidInvoice", "api:other.*", "fetch:DELETE"}, Approval: none.fn,
		Credentials: credentials(), OpenAPI: []agentfleet.OpenAPIModule{billingModule(srv)}})
	require.Equal(t, "201", ok(t, res))
	require.Empty(t, none.asked)
}

func TestOpenAPIApproveRuleGrammar(t *testing.T) {
	for _, good := range []string{"api:billing.createRefund", "api:billing.*", "api:b_2.get-x", "api:billing.* https://example.com/*"} {
		require.NoError(t, CheckApproveRules([]string{good}), good)
	}
	for _, bad := range []string{"api:billing", "api:Billing.x", "api:.x", "api:billing.", "api:billing.a b c"} {
		require.Error(t, CheckApproveRules([]string{bad}), bad)
	}
}

func TestCheckOpenAPIModules(t *testing.T) {
	spec := billingSpec("https://billing.example.com/v1")
	yamlSpec, _ := json.Marshal("openapi: 3.0.3\ninfo: {title: t, version: '1'}\nservers: [{url: 'https://y.example.com'}]\npaths:\n  /a:\n    get:\n      operationId: getA\n      responses: {'200': {description: ok}}\n")
	require.NoError(t, CheckOpenAPIModules([]agentfleet.OpenAPIModule{{Name: "billing", Spec: spec, Secret: "gh"}, {Name: "y", Spec: yamlSpec}}, []string{"gh"}))

	big, _ := json.Marshal(strings.Repeat(" ", OpenAPISpecMaxBytes+1))
	swagger := json.RawMessage(`{"swagger":"2.0","info":{"title":"t","version":"1"},"paths":{}}`)
	for _, c := range []struct {
		mod  agentfleet.OpenAPIModule
		want string
	}{
		{agentfleet.OpenAPIModule{Name: "Bad-Name", Spec: spec}, `openapi[0].name "Bad-Name"`},
		{agentfleet.OpenAPIModule{Name: "a", Spec: spec, SpecURL: "https://x/y"}, "openapi[0]: give spec or spec_url, not both"},
		{agentfleet.OpenAPIModule{Name: "a", SpecURL: "ftp://x/y"}, "openapi[0].spec_url"},
		{agentfleet.OpenAPIModule{Name: "a"}, "openapi[0].spec: give the OpenAPI 3 document"},
		{agentfleet.OpenAPIModule{Name: "a", Spec: spec, Secret: "nope"}, `openapi[0].secret "nope" is not one of the agent's secrets`},
		{agentfleet.OpenAPIModule{Name: "a", Spec: spec, BaseURL: "ftp://x"}, "openapi[0].base_url"},
		{agentfleet.OpenAPIModule{Name: "a", Spec: big}, "openapi[0].spec: the document is"},
		{agentfleet.OpenAPIModule{Name: "a", Spec: swagger}, "openapi[0].spec:"},
		{agentfleet.OpenAPIModule{Name: "a", Spec: json.RawMessage(`"openapi: [unclosed"`)}, "openapi[0].spec:"},
		{agentfleet.OpenAPIModule{Name: "a", Spec: json.RawMessage(`[1]`)}, "openapi[0].spec: give a JSON object"},
	} {
		err := CheckOpenAPIModules([]agentfleet.OpenAPIModule{c.mod}, []string{"gh"})
		require.Error(t, err, c.want)
		require.Contains(t, err.Error(), c.want)
	}
	err := CheckOpenAPIModules([]agentfleet.OpenAPIModule{{Name: "a", Spec: spec}, {Name: "a", Spec: spec}}, nil)
	require.ErrorContains(t, err, `openapi[1].name "a" is listed twice`)
}

// The prompt declares a short module in one line; help('api:<name>')
// prints a module's declarations, and require names what exists.
func TestOpenAPIDeclarations(t *testing.T) {
	t.Parallel()
	mod := agentfleet.OpenAPIModule{Name: "billing", Spec: billingSpec("https://billing.example.com")}
	d := OpenAPIDeclarations([]agentfleet.OpenAPIModule{mod})
	require.Contains(t, d, "declare function require(m: 'api:billing'): {getHealth(p?: {}): Res; getInvoice(p: {id: string; expand?: boolean}): Res; createRefund(p: {id: string; body: any}): Res};")
	require.Empty(t, OpenAPIDeclarations(nil))

	res := execute(t, sharedPool(t), agentfleet.ExecRequest{OpenAPI: []agentfleet.OpenAPIModule{mod}, Script: `function run() {
  help('api:billing');
  help();
  let e; try { require('api:nope'); } catch (x) { e = x.message; }
  return e;
}`})
	out := ok(t, res)
	require.Contains(t, res.Logs, "getInvoice(p: {id: string; expand?: boolean}): Res")
	require.Contains(t, res.Logs, "// require('api:billing'): 3 operations; help('api:billing') logs their declarations")
	require.Contains(t, out, `unknown module \"api:nope\"`)
	require.Contains(t, out, "api:billing")

	// Many operations: a catalog line, not every declaration.
	paths := map[string]any{}
	for i := range 40 {
		paths[fmt.Sprintf("/things/%d", i)] = map[string]any{"get": map[string]any{"operationId": fmt.Sprintf("getThing%d", i), "responses": map[string]any{"200": map[string]any{"description": "ok"}}}}
	}
	big, _ := json.Marshal(map[string]any{"openapi": "3.0.3", "info": map[string]any{"title": "t", "version": "1"}, "servers": []any{map[string]any{"url": "https://x.example.com"}}, "paths": paths})
	d = OpenAPIDeclarations([]agentfleet.OpenAPIModule{{Name: "things", Spec: big}})
	require.Contains(t, d, "// require('api:things'): 40 operations")
	require.Contains(t, d, "help('api:things')")
	require.Less(t, len(d), 1000)
}

// A recursive schema is a valid document; a path template parameter the
// document does not declare is still required; a $ref to nothing is
// refused naming the parser's complaint.
func TestOpenAPIDocumentEdges(t *testing.T) {
	rec := json.RawMessage(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"https://x.example.com"}],
  "paths":{"/nodes/{nodeId}":{"get":{"operationId":"getNode","responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Node"}}}}}}}},
  "components":{"schemas":{"Node":{"type":"object","properties":{"child":{"$ref":"#/components/schemas/Node"}}}}}}`)
	require.NoError(t, CheckOpenAPIModules([]agentfleet.OpenAPIModule{{Name: "tree", Spec: rec}}, nil))
	require.Contains(t, OpenAPIDeclarations([]agentfleet.OpenAPIModule{{Name: "tree", Spec: rec}}), "getNode(p: {nodeId: string}): Res")
	_, _, err := apiRequest(turnModules([]agentfleet.OpenAPIModule{{Name: "tree", Spec: rec}}), []byte(`{"module":"tree","operation":"getNode","params":{}}`))
	require.ErrorContains(t, err, `parameter "nodeId" (path) is required`)
	fa, tool, err := apiRequest(turnModules([]agentfleet.OpenAPIModule{{Name: "tree", Spec: rec}}), []byte(`{"module":"tree","operation":"getNode","params":{"nodeId":"a/b"}}`))
	require.NoError(t, err)
	require.Equal(t, "api:tree.getNode", tool)
	require.Equal(t, "https://x.example.com/nodes/a%2Fb", fa.URL, "a path parameter stays one segment")

	missing := json.RawMessage(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"https://x.example.com"}],
  "paths":{"/a":{"get":{"operationId":"getA","responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Gone"}}}}}}}}}`)
	err = CheckOpenAPIModules([]agentfleet.OpenAPIModule{{Name: "m", Spec: missing}}, nil)
	require.ErrorContains(t, err, "openapi[0].spec:")
	t.Log(err)
}

// BenchmarkOpenAPICall is one GET operation of a module against the same
// request by fetch, on loopback: what resolving the operation adds.
func BenchmarkOpenAPICall(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	defer srv.Close()
	p, err := New(Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	require.NoError(b, err)
	defer p.Close()
	mods := []agentfleet.OpenAPIModule{{Name: "billing", Spec: billingSpec(srv.URL)}}
	for _, c := range []struct{ name, script string }{
		{"fetch", `function run(a) { for (let i = 0; i < 100; i++) fetch(a.url + "/invoices/1"); return 1 }`},
		{"api", `function run() { const b = require('api:billing'); for (let i = 0; i < 100; i++) b.getInvoice({id: "1"}); return 1 }`},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := agentfleet.ExecRequest{Script: c.script, Args: []byte(`{"url":"` + srv.URL + `"}`), OpenAPI: mods}
			for b.Loop() {
				res, err := p.Execute(b.Context(), req)
				if err != nil || res.Err != nil {
					b.Fatal(err, res.Err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*100), "µs/call")
		})
	}
}

// A Policy that refuses an operation's request: the script catches a
// PolicyError, nothing is sent, and the refused call is told as
// tool_call and a tool_result that says denied.
func TestOpenAPIPolicyDenialIsTold(t *testing.T) {
	t.Parallel()
	srv := newBillingServer(t)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback, RootCAs: roots,
		Resolver: fakeResolver{"example.com": addrs("127.0.0.1")}},
		Policy: PolicyFunc(func(_ context.Context, c Call) (Decision, string) {
			if c.Primitive == "fetch" && strings.Contains(string(c.Args), "/refunds") {
				return Deny, "no refunds"
			}
			return Allow, ""
		})})
	var events []string
	req := agentfleet.ExecRequest{RunID: "run-1", Turn: 1, Credentials: credentials(), TenantSecrets: credentials(),
		OpenAPI:   []agentfleet.OpenAPIModule{billingModule(srv)},
		ToolEvent: func(ev agentfleet.Event) { events = append(events, string(ev.Type)+" "+ev.Summary) },
		Script: `function run() {
  const b = require('api:billing');
  try { b.createRefund({id: "in_1", body: {amount: 5}}); return "sent"; } catch (e) { return e.name + ": " + e.message; }
}`}
	out := ok(t, execute(t, p, req))
	require.Contains(t, out, `PolicyError: api:billing.createRefund denied by policy: no refunds`)
	require.Empty(t, srv.requests(), "nothing was sent")
	require.Len(t, events, 2)
	require.True(t, strings.HasPrefix(events[0], "tool_call api:billing.createRefund POST "), events[0])
	require.Equal(t, "tool_result api:billing.createRefund denied", events[1])
}
