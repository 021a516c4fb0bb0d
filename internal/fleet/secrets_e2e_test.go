package fleet_test

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/wire"
)

// echoAuth is an HTTPS API that records the Authorization header of
// each request and sends it back in the body, as a careless API's error
// page might.
type echoAuth struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func startEchoAuth(t *testing.T) *echoAuth {
	e := &echoAuth{}
	e.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.got = append(e.got, r.Header.Get("Authorization"))
		e.mu.Unlock()
		_, _ = fmt.Fprintf(w, "you sent %q", r.Header.Get("Authorization"))
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *echoAuth) received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// echoTurns: turn 1 POSTs to the API the task names, logs and carries
// what came back; turn 2 answers with it.
func echoTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	target, ok := strings.CutPrefix(r.FirstUser(), "comment on ")
	if !ok {
		return "", usage, fmt.Errorf("unexpected task %q", r.FirstUser())
	}
	if assistantTurns(r) == 0 {
		return "Comment.\n```javascript\nfunction run() {\n" +
			"  const r = require('http').post(" + fmt.Sprintf("%q", target) + ", {body: 'Looks good'}, {headers: {Authorization: 'Bearer guess'}});\n" +
			"  log(r.body);\n  return {said: r.body};\n}\n```", usage, nil
	}
	return "Done.\n```javascript\nfunction run(args) { answer(args.said) }\n```", usage, nil
}

// A tenant's secret set through the API reaches the HTTPS API its agent
// calls, in the header the secret names, replacing the script's own; the
// value that came back is [secret:github_token] in the answer, the
// steps, the events and every prompt, and an agent that does not name
// the secret sends none.
func TestFleetSecretsAreSentAndNeverSeen(t *testing.T) {
	api := startEchoAuth(t)
	cas := x509Pool(t, api.srv)
	f := setupFleetWith(t, fleetOptions{responder: echoTurns, workers: 1,
		sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: cas}}})
	u, err := url.Parse(api.srv.URL)
	require.NoError(t, err)
	const token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
	sec, err := f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: token, Hosts: []string{u.Hostname()}})
	require.NoError(t, err)
	require.Equal(t, 1, sec.Version)
	f.putAgent("reviewer", map[string]any{"secrets": []string{"github_token"}})

	run, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "reviewer", Message: "comment on " + api.srv.URL + "/comments"})
	require.NoError(t, err)
	done := f.wait(run.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.Equal(t, []string{"Bearer " + token}, api.received(), "the worker sent the secret, in place of the script's header")
	require.JSONEq(t, `"you sent \"Bearer [secret:github_token]\""`, string(done.Answer))

	steps, err := f.tenant.RunSteps(f.ctx, run.ID, -1)
	require.NoError(t, err)
	seen := map[string]any{"run": done, "steps": steps, "events": f.events(run.ID)}
	for what, v := range seen {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.NotContains(t, string(b), token, what)
		require.NotContains(t, string(b), "ghp_0123", what)
	}
	b, err := json.Marshal(steps)
	require.NoError(t, err)
	require.Contains(t, string(b), "[secret:github_token]", "the logged body names the secret")
	for _, r := range f.model.Received() {
		b, err := json.Marshal(r.Messages)
		require.NoError(t, err)
		require.NotContains(t, string(b), token, "no prompt holds the value")
	}

	// The default agent names no secret: its request goes out as the
	// script wrote it.
	plain, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Message: "comment on " + api.srv.URL + "/comments"})
	require.NoError(t, err)
	done = f.wait(plain.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.Equal(t, []string{"Bearer " + token, "Bearer guess"}, api.received())

	// An agent that names a secret the tenant lacks fails its run, saying so.
	f.putAgent("forgetful", map[string]any{"secrets": []string{"missing_token"}})
	bad, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "forgetful", Message: "comment on " + api.srv.URL + "/comments"})
	require.NoError(t, err)
	done = f.wait(bad.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusFailed, done.Status)
	require.Contains(t, done.Error, "missing_token")
	require.Len(t, api.received(), 2, "nothing was sent for it")
}

// x509Pool trusts the test server's certificate.
func x509Pool(t *testing.T, srv *httptest.Server) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}
