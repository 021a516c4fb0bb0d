package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// billingAPI is an HTTPS billing API that records each request (method,
// path and query, Authorization, Idempotency-Key, body) and echoes the
// Authorization header it got back, as a careless API might.
type billingAPI struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func newBillingAPI(t *testing.T) *billingAPI {
	b := &billingAPI{}
	b.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.got = append(b.got, fmt.Sprintf("%s %s auth=%s idem=%s %s", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), body))
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "amount": 42, "you_sent": r.Header.Get("Authorization")})
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *billingAPI) received() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got...)
}

// billingDocument is a generated OpenAPI 3 document of the billing API:
// a GET, and two POSTs with bodies.
func billingDocument(base string) map[string]any {
	idParam := map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
	post := func(id string) map[string]any {
		return map[string]any{"post": map[string]any{"operationId": id, "parameters": []any{idParam},
			"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			"responses":   map[string]any{"201": map[string]any{"description": "made"}}}}
	}
	return map[string]any{
		"openapi": "3.0.3", "info": map[string]any{"title": "billing", "version": "1"},
		"servers": []any{map[string]any{"url": base + "/v1"}},
		"paths": map[string]any{
			"/invoices/{id}": map[string]any{"get": map[string]any{"operationId": "getInvoice",
				"parameters": []any{idParam, map[string]any{"name": "expand", "in": "query", "schema": map[string]any{"type": "string"}}},
				"responses":  map[string]any{"200": map[string]any{"description": "ok"}}}},
			"/invoices/{id}/credits": post("issueCredit"),
			"/invoices/{id}/refunds": post("createRefund"),
		},
	}
}

// billingTurns reads an invoice (GET), issues a credit (a POST no rule
// covers) and refunds (a POST its agent's rule api:billing.createRefund
// parks), then answers with what it got.
func billingTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	if assistantTurns(r) == 0 {
		return "Bill.\n```javascript\nfunction run() {\n" +
			"  const b = require('api:billing');\n" +
			"  const inv = b.getInvoice({id: 'in_1', expand: 'lines'});\n" +
			"  const credit = b.issueCredit({id: 'in_1', body: {amount: 1}});\n" +
			"  const refund = b.createRefund({id: 'in_1', body: {amount: inv.json().amount}});\n" +
			"  log('refund', refund.status, refund.body);\n" +
			"  return {inv: inv.status, credit: credit.status, refund: refund.status, echo: refund.json().you_sent};\n}\n```", usage, nil
	}
	return "Done.\n```javascript\nfunction run(args) { answer(args) }\n```", usage, nil
}

// An agent's OpenAPI document, served by a local HTTPS API: its script
// calls a GET and two POSTs by operation, parameters by name; the
// agent's secret reaches the API in its header and is nowhere else (run,
// events, steps, SSE, prompts); the rule api:billing.createRefund parks
// the run until approved, and the turn run again replays the POST it
// had made (issueCredit goes out once) and sends the refund once; each
// call is told as tool_call and tool_result events. On SQLite and on
// PostgreSQL.
func TestFleetOpenAPIModule(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			api := newBillingAPI(t)
			o := fleetOptions{responder: billingTurns, workers: 1,
				sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: x509Pool(t, api.srv)}}}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			f := setupFleetWith(t, o)
			u, err := url.Parse(api.srv.URL)
			require.NoError(t, err)
			const token = "sk_live_billing_0123456789abcdefghij"
			_, err = f.tenant.PutSecret(f.ctx, "", "billing_key", wire.SecretRequest{Value: token, Hosts: []string{u.Hostname()}})
			require.NoError(t, err)
			agent := f.putAgent("biller", map[string]any{
				"secrets": []string{"billing_key"},
				"approve": []string{"api:billing.createRefund"},
				"openapi": []any{map[string]any{"name": "billing", "spec": billingDocument(api.srv.URL), "secret": "billing_key"}},
			})
			require.Len(t, agent.OpenAPI, 1)

			run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "biller", Message: "refund invoice in_1"})
			require.NoError(t, err)
			a := f.pendingFor(run.ID)
			require.Equal(t, "api:billing.createRefund", a.Primitive)
			require.Equal(t, "POST", a.Method)
			require.Equal(t, api.srv.URL+"/v1/invoices/in_1/refunds", a.URL)
			require.Contains(t, a.Preview, `"amount":42`)
			auth := "Bearer " + token
			first := []string{
				"GET /v1/invoices/in_1?expand=lines auth=" + auth + " idem= ",
				"POST /v1/invoices/in_1/credits auth=" + auth + " idem=" + run.ID + `/1/0 {"amount":1}`,
			}
			require.Equal(t, first, api.received(), "nothing waiting for approval went out")

			_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{Reason: "refund due"})
			require.NoError(t, err)
			done := f.wait(run.ID, 60*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
			require.JSONEq(t, `{"inv":200,"credit":201,"refund":201,"echo":"Bearer [secret:billing_key]"}`, string(done.Answer))
			require.Equal(t, append(first,
				"GET /v1/invoices/in_1?expand=lines auth="+auth+" idem= ",
				"POST /v1/invoices/in_1/refunds auth="+auth+" idem="+run.ID+`/1/1 {"amount":42}`,
			), api.received(), "the turn run again: the GET again, the credit replayed from the journal, the refund once")

			// tool_call and tool_result events, of the committed turn.
			var calls, results []agentfleet.Event
			for _, ev := range f.events(run.ID) {
				switch ev.Type {
				case agentfleet.EventToolCall:
					calls = append(calls, ev)
				case agentfleet.EventToolResult:
					results = append(results, ev)
				}
			}
			require.GreaterOrEqual(t, len(calls), 3)
			require.GreaterOrEqual(t, len(results), 3)
			var names []string
			for _, ev := range results {
				var args struct {
					Tool     string `json:"tool"`
					Status   int    `json:"status"`
					Replayed bool   `json:"replayed"`
				}
				require.NoError(t, json.Unmarshal(ev.Args, &args))
				names = append(names, fmt.Sprintf("%s %d %v", args.Tool, args.Status, args.Replayed))
			}
			require.Contains(t, names, "api:billing.issueCredit 201 true", "the credit replayed on the second attempt")
			require.Contains(t, names, "api:billing.createRefund 201 false")

			// The secret is nowhere but at the API.
			steps, err := f.tenant.RunSteps(f.ctx, run.ID, -1)
			require.NoError(t, err)
			seen := map[string][]byte{"sse": sseBody(t, f, run.ID)}
			for what, v := range map[string]any{"run": done, "events": f.events(run.ID), "steps": steps} {
				b, err := json.Marshal(v)
				require.NoError(t, err)
				seen[what] = b
			}
			require.Contains(t, string(seen["steps"]), "[secret:billing_key]", "the echoed header is logged redacted")
			for i, r := range f.model.Received() {
				b, err := json.Marshal(r.Messages)
				require.NoError(t, err)
				seen[fmt.Sprintf("prompt %d", i)] = b
				if i == 0 {
					require.Contains(t, string(b), "require(m: 'api:billing')", "the prompt declares the module")
				}
			}
			for what, b := range seen {
				require.NotContains(t, string(b), token, what)
				require.NotContains(t, string(b), token[:14], what)
			}
			require.False(t, strings.Contains(string(seen["events"]), "Bearer sk_"), "no event carries the header")
		})
	}
}

// effectDocument is an OpenAPI document of effectTarget: two POSTs.
func effectDocument(base string) map[string]any {
	post := func(id string) map[string]any {
		return map[string]any{"post": map[string]any{"operationId": id,
			"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			"responses":   map[string]any{"200": map[string]any{"description": "ok"}}}}
	}
	return map[string]any{"openapi": "3.0.3", "info": map[string]any{"title": "effects", "version": "1"},
		"servers": []any{map[string]any{"url": base}},
		"paths":   map[string]any{"/effect": post("makeEffect"), "/hold": post("holdOn")}}
}

// effectOpTurns makes an effect, then holds, through the agent's
// OpenAPI module; then answers with what it saw.
func effectOpTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
	if assistantTurns(r) == 0 {
		return "Act.\n```javascript\nfunction run() {\n" +
			"  const fx = require('api:fx');\n" +
			"  const a = fx.makeEffect({body: {n: 1}}).json().serial;\n" +
			"  const b = fx.holdOn({body: {}}).json().serial;\n" +
			"  return {a, b};\n}\n```", usage, nil
	}
	return "Report.\n```javascript\nfunction run(args) { answer(args) }\n```", usage, nil
}

// A worker process SIGKILLed between two POST operations of an OpenAPI
// module and the turn's commit: the turn runs again on another worker,
// replays the recorded POST (not sent again) and sends again only the
// one in flight at the kill, with the same Idempotency-Key.
func TestMultiProcessOpenAPIJournalSurvivesWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries")
	}
	target, srv := startEffectTarget(t)
	f := startWorkerFleet(t, effectOpTurns)
	ctx := f.ctx
	body, err := json.Marshal(map[string]any{"openapi": []any{map[string]any{"name": "fx", "spec": effectDocument(srv.URL)}}})
	require.NoError(t, err)
	_, err = f.tenant.PutAgentJSON(ctx, "effector", body)
	require.NoError(t, err)
	run, err := f.tenant.CreateRun(ctx, wire.RunCreateRequest{Agent: "effector", Message: "effect"})
	require.NoError(t, err)

	select {
	case <-target.held: // makeEffect recorded, the turn not committed
	case <-time.After(60 * time.Second):
		t.Fatal("the script never reached /hold")
	}
	require.NoError(t, f.first.cmd.Process.Signal(syscall.SIGKILL))
	<-f.first.done
	f.startWorker("worker1")

	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done, err := f.tenant.Wait(waitCtx, run.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `{"a":1,"b":2}`, string(done.Answer), "turn 1 ran again with what its first attempt saw")
	target.mu.Lock()
	require.Equal(t, map[string]int{"/effect " + run.ID + "/1/0": 1, "/hold " + run.ID + "/1/1": 2}, target.byKey,
		"the recorded POST went out once; the one in flight at the kill again, with its key")
	target.mu.Unlock()
	trace, err := f.tenant.RunSteps(ctx, run.ID, 1)
	require.NoError(t, err)
	var calls []string
	for _, j := range trace.Journal {
		calls = append(calls, j.Primitive+" "+j.Method+" "+strings.TrimPrefix(j.URL, srv.URL))
	}
	require.Equal(t, []string{"api:fx.makeEffect POST /effect", "api:fx.holdOn POST /hold"}, calls)
}
