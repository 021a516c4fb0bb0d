package fleet_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/internal/telemetry"
	"github.com/agentfleet/agentfleet/wire"
)

// echoAPI is an HTTPS API that records each request's path, Authorization
// header and body, and reflects the request's headers back in its
// response headers and body, as a careless API's error page might.
type echoAPI struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func newEchoAPI(t *testing.T, tlsConfig *tls.Config) *echoAPI {
	e := &echoAPI{}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.got = append(e.got, fmt.Sprintf("%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("Authorization"), body))
		e.mu.Unlock()
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"you_sent": r.Header})
	}))
	if tlsConfig != nil {
		e.srv.TLS = tlsConfig
	}
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *echoAPI) received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// plainAPI counts the requests that reach it.
func plainAPI(t *testing.T) (*httptest.Server, func() int) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// probeTurns is a script that tries every way to get at a secret it is
// not shown: it reads the response headers and body of an API that
// reflects the request's, asks secret() for it, logs JSON.stringify of
// all it has, sends it to a plain-http address of the secret's host,
// carries it, throws it in an error, and answers with it.
func probeTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	fields := strings.Fields(strings.TrimPrefix(r.FirstUser(), "probe "))
	if len(fields) != 2 {
		return "", usage, fmt.Errorf("unexpected task %q", r.FirstUser())
	}
	api, plain := fields[0], fields[1]
	switch assistantTurns(r) {
	case 0:
		return "Probe.\n```javascript\nfunction run() {\n" +
			"  const http = require('http');\n" +
			"  const r = http.post(" + fmt.Sprintf("%q", api+"/comments") + ", {body: 'Looks good'}, {headers: {Authorization: 'Bearer guess'}});\n" +
			"  let s; try { s = secret('github_token'); } catch (e) { s = 'secret() threw: ' + e.message; }\n" +
			"  let plain; try { http.get(" + fmt.Sprintf("%q", plain+"/comments") + "); plain = 'sent'; } catch (e) { plain = e.message; }\n" +
			"  const all = {r: r, json: r.json(), s: s, plain: plain, globals: Object.keys(globalThis)};\n" +
			"  log(JSON.stringify(all));\n" +
			"  console.error('the header came back as', r.headers['x-echo-authorization']);\n" +
			"  return {said: r.body, hdr: r.headers['x-echo-authorization'], all: all};\n}\n```", usage, nil
	case 1:
		return "Throw it.\n```javascript\nfunction run(args) { throw new Error('upstream said ' + args.hdr + ' and ' + args.said) }\n```", usage, nil
	}
	return "Answer it.\n```javascript\nfunction run(args) { answer({hdr: args.hdr, said: args.said, plain: args.all.plain, s: args.all.s}) }\n```", usage, nil
}

// A tenant's secret, set through the API, reaches the HTTPS API its
// agent calls, in the header the secret names, replacing the script's
// own. A script that tries every way to get it finds [secret:github_token]
// or nothing: in the run, its answer and error, its steps and events, the
// SSE stream, every NATS message the fleet publishes, every trace span
// and every prompt. A plain-http request to the secret's host is not sent
// and the script is told why. On SQLite and on PostgreSQL.
func TestFleetSecretsAreSentAndNeverSeen(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			api := newEchoAPI(t, nil)
			plain, plainHits := plainAPI(t)
			spans := tracetest.NewInMemoryExporter()
			o := fleetOptions{responder: probeTurns, workers: 1,
				tracer:  telemetry.New(sdktrace.NewSimpleSpanProcessor(spans), "agentfleet-worker"),
				sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: x509Pool(t, api.srv)}}}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			f := setupFleetWith(t, o)
			published := captureNATS(t, f)

			u, err := url.Parse(api.srv.URL)
			require.NoError(t, err)
			const token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
			sec, err := f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: token, Hosts: []string{u.Hostname()}})
			require.NoError(t, err)
			require.Equal(t, 1, sec.Version)
			f.putAgent("reviewer", map[string]any{"secrets": []string{"github_token"}})

			run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "reviewer", Message: "probe " + api.srv.URL + " " + plain.URL})
			require.NoError(t, err)
			done := f.wait(run.ID, 60*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)

			require.Equal(t, []string{"POST /comments Bearer " + token + ` {"body":"Looks good"}`}, api.received(),
				"the worker sent the secret, in place of the script's header, once")
			require.Zero(t, plainHits(), "the plain-http request to the secret's host was not sent")
			var answer struct{ Hdr, Said, Plain, S string }
			require.NoError(t, json.Unmarshal(done.Answer, &answer))
			require.Equal(t, "Bearer [secret:github_token]", answer.Hdr)
			require.Contains(t, answer.Said, "Bearer [secret:github_token]")
			require.Contains(t, answer.Plain, `secret "github_token" is sent over HTTPS only`)
			require.Contains(t, answer.S, "secret() threw")

			steps, err := f.tenant.RunSteps(f.ctx, run.ID, -1)
			require.NoError(t, err)
			b, err := json.Marshal(steps)
			require.NoError(t, err)
			require.Contains(t, string(b), "[secret:github_token]", "the logged response names the secret")
			require.Contains(t, string(b), "upstream said Bearer [secret:github_token]", "the thrown error names it")

			seen := map[string][]byte{"steps": b, "sse": sseBody(t, f, run.ID)}
			for what, v := range map[string]any{"run": done, "events": f.events(run.ID)} {
				b, err := json.Marshal(v)
				require.NoError(t, err)
				seen[what] = b
			}
			for i, r := range f.model.Received() {
				b, err := json.Marshal(r.Messages)
				require.NoError(t, err)
				seen[fmt.Sprintf("prompt %d", i)] = b
			}
			require.Eventually(t, func() bool { return len(spansOf(spans, done.ID)) > 0 }, 5*time.Second, 10*time.Millisecond)
			for i, s := range spansOf(spans, done.ID) {
				b, err := json.Marshal(map[string]any{"name": s.Name, "attrs": s.Attributes, "events": s.Events, "status": s.Status})
				require.NoError(t, err)
				seen[fmt.Sprintf("span %d %s", i, s.Name)] = b
			}
			msgs := published()
			require.True(t, slices.ContainsFunc(msgs, func(m *nats.Msg) bool { return strings.Contains(m.Subject, done.ID) }), "the run's events were captured")
			for i, m := range msgs {
				seen[fmt.Sprintf("nats %d %s", i, m.Subject)] = m.Data
			}
			for what, b := range seen {
				require.NotContains(t, string(b), token, what)
				require.NotContains(t, string(b), token[:12], what)
			}

			// The default agent names no secret: its request goes out as
			// the script wrote it, and its plain-http one is sent.
			plainRun, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Message: "probe " + api.srv.URL + " " + plain.URL})
			require.NoError(t, err)
			done = f.wait(plainRun.ID, 60*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
			require.Equal(t, `POST /comments Bearer guess {"body":"Looks good"}`, api.received()[1])
			require.Equal(t, 1, plainHits())
		})
	}
}

// Deleting a secret an agent names fails the agent's next run, before
// anything is sent or paid for, saying which secret is missing.
func TestFleetDeletedSecretFailsTheAgentsNextRun(t *testing.T) {
	api := newEchoAPI(t, nil)
	plain, _ := plainAPI(t)
	f := setupFleetWith(t, fleetOptions{responder: probeTurns, workers: 1,
		sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: x509Pool(t, api.srv)}}})
	u, err := url.Parse(api.srv.URL)
	require.NoError(t, err)
	_, err = f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", Hosts: []string{u.Hostname()}})
	require.NoError(t, err)
	f.putAgent("reviewer", map[string]any{"secrets": []string{"github_token"}})
	require.NoError(t, f.tenant.DeleteSecret(f.ctx, "", "github_token"))

	run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "reviewer", Message: "probe " + api.srv.URL + " " + plain.URL})
	require.NoError(t, err)
	done := f.wait(run.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusFailed, done.Status)
	require.Contains(t, done.Error, "names secret github_token, which tenant acme does not have")
	require.Empty(t, api.received(), "nothing was sent")
	require.Zero(t, f.model.Requests(), "nothing was paid for")
}

// Master-key rotation: a secret sealed under the old key still reaches
// its API from workers that hold the new key with the old one as
// AGENTFLEET_SECRETS_KEY_PREVIOUS, and a rekey leaves no secret under
// the old key.
func TestFleetSecretsSurviveKeyRotation(t *testing.T) {
	api := newEchoAPI(t, nil)
	plain, _ := plainAPI(t)
	oldKey, newKey := secrets.NewKey(), secrets.NewKey()
	old, err := secrets.ParseKey(oldKey)
	require.NoError(t, err)
	rotated, err := secrets.ParseKeys(newKey, oldKey)
	require.NoError(t, err)
	f := setupFleetWith(t, fleetOptions{responder: probeTurns, workers: 1, secrets: rotated,
		sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: x509Pool(t, api.srv)}}})
	u, err := url.Parse(api.srv.URL)
	require.NoError(t, err)
	const token = "ghp_sealedUnderTheOldKey0123456789abcd"
	sealed, err := old.Seal(token, secrets.SecretAD("acme", "github_token"))
	require.NoError(t, err)
	_, err = f.store.SecretPut(f.ctx, store.SecretPutParams{Tenant: "acme", Name: "github_token", Sealed: sealed, KeyID: secrets.KeyIDOf(sealed), Hosts: []string{u.Hostname()}})
	require.NoError(t, err)
	f.putAgent("reviewer", map[string]any{"secrets": []string{"github_token"}})

	probe := func() {
		t.Helper()
		run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "reviewer", Message: "probe " + api.srv.URL + " " + plain.URL})
		require.NoError(t, err)
		done := f.wait(run.ID, 60*time.Second)
		require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
		got := api.received()
		require.Equal(t, `POST /comments Bearer `+token+` {"body":"Looks good"}`, got[len(got)-1])
	}
	probe()

	rep, err := f.admin.RekeySecrets(f.ctx)
	require.NoError(t, err)
	require.Equal(t, rotated.KeyID(), rep.KeyID)
	require.Empty(t, rep.Unopened)
	require.Positive(t, rep.Rewritten)
	list, err := f.store.SecretSealedList(f.ctx, "acme")
	require.NoError(t, err)
	require.Len(t, list, 1)
	for _, s := range list {
		require.Equal(t, rotated.KeyID(), secrets.KeyIDOf(s.Sealed), "no secret is left under the old key")
		require.NotEqual(t, old.KeyID(), s.KeyID)
	}
	only, err := secrets.ParseKey(newKey)
	require.NoError(t, err)
	v, err := only.Open(list[0].Sealed, secrets.SecretAD("acme", "github_token"))
	require.NoError(t, err, "the new key alone opens it")
	require.Equal(t, token, v)
	probe()
}

// The README's example, end to end: a GitHub trigger on pull_request
// starts a run of an agent with secrets: [github_token] bound to
// api.github.com, whose script comments on the pull request; a local
// HTTPS server stands in for the API (the sandbox's resolver sends
// api.github.com to it, its certificate is for api.github.com) and
// receives the token in Authorization.
func TestFleetReadmePullRequestReview(t *testing.T) {
	cert, pool := selfSignedFor(t, "api.github.com")
	github := newEchoAPI(t, &tls.Config{Certificates: []tls.Certificate{cert}})
	port := github.srv.Listener.Addr().(*net.TCPAddr).Port
	base := fmt.Sprintf("https://api.github.com:%d", port)
	responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
		if assistantTurns(r) == 0 {
			return "Comment on it.\n```javascript\nfunction run(args) {\n" +
				"  const pr = args; // a trigger's run has the payload as its context\n" +
				"  const r = require('http').post(" + fmt.Sprintf("%q", base) + " + '/repos/' + pr.repository.full_name + '/issues/' + pr.number + '/comments', {body: 'Reviewed: ' + pr.pull_request.title});\n" +
				"  return {status: r.status};\n}\n```", usage, nil
		}
		return "Done.\n```javascript\nfunction run(args) { answer('commented: ' + args.status) }\n```", usage, nil
	}
	f := setupFleetWith(t, fleetOptions{responder: responder, workers: 1, sandbox: sandbox.Config{Network: sandbox.NetworkConfig{
		Allow: testEgress.Allow, RootCAs: pool, Resolver: hostsResolver{"api.github.com": netip.MustParseAddr("127.0.0.1")},
	}}})

	_, err := f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: "ghp_readmeExampleToken0123456789abcdef", Hosts: []string{"api.github.com"}})
	require.NoError(t, err)
	f.putAgent("pr-review", map[string]any{"system": "You review pull requests and comment on them through the GitHub API.", "secrets": []string{"github_token"}})
	tv, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{
		Name: new("pr-review"), Scheme: new("github"), Events: &[]string{"pull_request.opened"}, Agent: new("pr-review"),
		Message:   new("Review pull request #{{.payload.number}} of {{.payload.repository.full_name}}: {{.payload.pull_request.title}}"),
		SessionID: new("{{slug .payload.repository.full_name}}"),
	})
	require.NoError(t, err)
	body := []byte(`{"action":"opened","number":7,"pull_request":{"title":"Fix the flaky test"},"repository":{"full_name":"acme/web"}}`)
	res := sendHook(t, apiClient(t, f.dispatcher.URL(), ""), tv, tv.Secret, "try-1", "pull_request", body)
	require.Equal(t, http.StatusAccepted, res.Status)
	done := f.wait(res.Answer.RunID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `"commented: 200"`, string(done.Answer))
	require.Equal(t, "pr-review", done.Agent)
	require.Equal(t, []string{`POST /repos/acme/web/issues/7/comments Bearer ghp_readmeExampleToken0123456789abcdef {"body":"Reviewed: Fix the flaky test"}`}, github.received())
}

// hostsResolver resolves the names it has, as /etc/hosts would.
type hostsResolver map[string]netip.Addr

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// selfSignedFor is a certificate for name that is its own root, and a
// pool that trusts it.
func selfSignedFor(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// captureNATS records every message published on the fleet's NATS server
// from now on; the function it returns gives those seen so far.
func captureNATS(t *testing.T, f *testFleet) func() []*nats.Msg {
	t.Helper()
	nc, err := nats.Connect(f.emb.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	var msgs []*nats.Msg
	_, err = nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		msgs = append(msgs, m)
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return func() []*nats.Msg {
		require.NoError(t, nc.Flush())
		mu.Lock()
		defer mu.Unlock()
		return append([]*nats.Msg(nil), msgs...)
	}
}

// sseBody is the whole SSE stream of an ended run, as a client reads it.
func sseBody(t *testing.T, f *testFleet, runID string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.dispatcher.URL()+"/v1/runs/"+runID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.tenant.Token)
	resp, err := f.tenant.HTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), "event: done")
	return b
}

// spansOf are the exported spans of a run's trace.
func spansOf(exp *tracetest.InMemoryExporter, runID string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	id := telemetry.RunTraceID(runID)
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// x509Pool trusts the test server's certificate.
func x509Pool(t *testing.T, srv *httptest.Server) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}
