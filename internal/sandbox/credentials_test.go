package sandbox

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// credServer is a test server that records the credential header of
// every request it gets, echoes the request's headers back in its body,
// and redirects /redirect?to=URL.
type credServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // "path header-value" per request
}

func newCredServer(t *testing.T, tls bool, header string) *credServer {
	t.Helper()
	s := &credServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path+" "+strings.Join(r.Header.Values(header), ","))
		s.mu.Unlock()
		if to := r.URL.Query().Get("to"); r.URL.Path == "/redirect" && to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo", strings.Join(r.Header.Values(header), ","))
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "headers": r.Header})
	})
	if tls {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *credServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func (s *credServer) port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

const (
	credValueSecret = "s3cr3t-VALUE-9f8e7d6c"
	exposedSecret   = "signing-key-4b3a2910"
)

// credPool is a pool whose fetch reaches the test servers on loopback,
// as 127.0.0.1 and as example.com (both in httptest's certificate, which
// it trusts).
func credPool(t *testing.T, cert *x509.Certificate) *Pool {
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback, RootCAs: roots,
		Resolver: fakeResolver{"example.com": addrs("127.0.0.1")}}})
}

// credentials is the agent's: gh goes to example.com in X-Api-Key,
// sign is exposed to scripts and sent nowhere.
func credentials() []agentfleet.OpenSecret {
	return []agentfleet.OpenSecret{
		{Secret: agentfleet.Secret{Name: "gh", Hosts: []string{"example.com"}, Header: "X-Api-Key", Format: "token {value}"}, Value: credValueSecret},
		{Secret: agentfleet.Secret{Name: "sign", Hosts: []string{"sign.invalid"}, Expose: true}, Value: exposedSecret},
	}
}

// A credential is sent by the parent in its header, formatted, on an
// HTTPS request to its host, replacing the script's header of that name;
// a plain-http request to the host gets nothing, and neither does a
// redirect to another host or to http; one to its own host keeps it.
// What the script sees - the response, which echoes the header - holds
// [secret:gh], never the value.
func TestCredentialSentOnlyOverHTTPSToItsHosts(t *testing.T) {
	t.Parallel()
	const header = "X-Api-Key"
	a := newCredServer(t, true, header)
	b := newCredServer(t, true, header)
	plain := newCredServer(t, false, header)
	p := credPool(t, a.Certificate())
	home := fmt.Sprintf("https://example.com:%d", a.port())
	args, _ := json.Marshal(map[string]string{
		"home":  home,
		"plain": fmt.Sprintf("http://example.com:%d", plain.port()),
		"other": fmt.Sprintf("https://127.0.0.1:%d", b.port()),
		"probe": credValueSecret[3:15], // a piece, which no redactor replaces
	})
	res := execute(t, p, agentfleet.ExecRequest{Args: args, Credentials: credentials(), Script: `function run(a) {
  const opts = {headers: {"x-api-key": "the script's own"}};
  const r = fetch(a.home + "/echo", opts);
  log("seen:", r.body, r.headers["x-echo"]);
  const refused = [];
  try { fetch(a.plain + "/plain", opts); } catch (e) { refused.push(e.message); }
  fetch(a.home + "/redirect?to=" + encodeURIComponent(a.other + "/elsewhere"), opts);
  try { fetch(a.home + "/redirect?to=" + encodeURIComponent(a.plain + "/downgraded")); } catch (e) { refused.push(e.message); }
  fetch(a.home + "/redirect?to=" + encodeURIComponent(a.home + "/same"));
  const leak = r.body.indexOf(a.probe) >= 0 || r.headers["x-echo"].indexOf(a.probe) >= 0;
  return {echo: r.json().headers["X-Api-Key"], hdr: r.headers["x-echo"], body: r.body, leak, refused};
}`})
	out := ok(t, res)

	want := "token " + credValueSecret
	require.Equal(t, []string{"/echo " + want, "/redirect " + want, "/redirect " + want, "/redirect " + want, "/same " + want}, a.requests(),
		"the header arrives formatted, once, in place of the script's")
	require.Empty(t, plain.requests(), "a plain-http request to a secret's host is not sent, nor is a redirect down to one")
	require.Equal(t, []string{"/elsewhere "}, b.requests(), "a redirect to another host does not carry it")

	var got struct {
		Echo    []string `json:"echo"`
		Hdr     string   `json:"hdr"`
		Leak    bool     `json:"leak"`
		Refused []string `json:"refused"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.Refused, 2)
	for _, msg := range got.Refused {
		require.Contains(t, msg, `secret "gh" is sent over HTTPS only`, "the script is told why")
	}
	require.Contains(t, got.Refused[1], "redirect to http://example.com:")
	require.False(t, got.Leak, "the script saw the value in the response")
	require.Equal(t, []string{"token [secret:gh]"}, got.Echo, "the script's view of the echo")
	require.Equal(t, "token [secret:gh]", got.Hdr)
	for _, s := range []string{out, res.Logs} {
		require.NotContains(t, s, credValueSecret)
	}
	require.Contains(t, res.Logs, "[secret:gh]")
}

// The default header and format: Authorization: Bearer <value>; a
// script's Authorization header, in any spelling, is replaced.
func TestCredentialDefaultHeader(t *testing.T) {
	t.Parallel()
	a := newCredServer(t, true, "Authorization")
	p := credPool(t, a.Certificate())
	creds := []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "tok", Hosts: []string{"EXAMPLE.com."}}, Value: credValueSecret}}
	args, _ := json.Marshal(map[string]string{"home": fmt.Sprintf("https://example.com:%d", a.port())})
	res := execute(t, p, agentfleet.ExecRequest{Args: args, Credentials: creds, Script: `function run(a) {
  return fetch(a.home + "/x", {headers: {AUTHORIZATION: "Bearer mine"}}).status;
}`})
	require.Equal(t, "200", ok(t, res))
	require.Equal(t, []string{"/x Bearer " + credValueSecret}, a.requests())
}

// The journal entry of a call that carried a credential, and the
// approval asked for it, are of the script's request: no header, no
// value, and the digest is the one the same call has without the
// credential.
func TestCredentialNotInJournalOrApproval(t *testing.T) {
	t.Parallel()
	a := newCredServer(t, true, "X-Api-Key")
	p := credPool(t, a.Certificate())
	args, _ := json.Marshal(map[string]string{"home": fmt.Sprintf("https://example.com:%d", a.port())})
	script := `function run(a) {
  const r = require("http").post(a.home + "/orders", {sig: secret("sign")});
  return r.json().headers["X-Api-Key"];
}`
	j := newMemJournal()
	appr := &approvals{state: agentfleet.ApprovalApproved}
	req := agentfleet.ExecRequest{Args: args, Credentials: credentials(), Script: script, RunID: "run-1", Turn: 1,
		Journal: j, Approve: []string{"http.post"}, Approval: appr.fn}
	res := execute(t, p, req)
	require.JSONEq(t, `["token [secret:gh]"]`, ok(t, res))
	require.Equal(t, []string{"/orders token " + credValueSecret}, a.requests())

	require.Len(t, j.entries, 1)
	entry, _ := json.Marshal(j.entries[0])
	require.NotContains(t, string(entry), credValueSecret)
	require.Contains(t, string(entry), "[secret:gh]", "the recorded response is the script's, redacted")

	require.Len(t, appr.asked, 1)
	asked, _ := json.Marshal(appr.asked[0])
	require.NotContains(t, string(asked), credValueSecret)
	require.NotContains(t, string(asked), exposedSecret, "the preview of a body holding an exposed value")
	require.Contains(t, appr.asked[0].Preview, "[secret:sign]")

	// Without credentials the same call asks for the same approval.
	appr2 := &approvals{state: agentfleet.ApprovalPending}
	req.Credentials, req.Journal, req.Approval = []agentfleet.OpenSecret{credentials()[1]}, nil, appr2.fn
	res = execute(t, p, req)
	require.NotNil(t, res.Approval)
	require.Equal(t, appr.asked[0].Digest, appr2.asked[0].Digest)
}

// secret(name) returns an exposed credential's value; any other name
// throws, saying why; without credentials there is no secret(). What the
// script does with the value - log it, answer it, throw it, carry it -
// shows [secret:<name>].
func TestSecretPrimitive(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	creds := credentials()
	res := execute(t, p, agentfleet.ExecRequest{Credentials: creds, Script: `function run() {
  const v = secret("sign");
  log("value", v, {v});
  return {v, len: v.length};
}`})
	require.JSONEq(t, `{"v":"[secret:sign]","len":20}`, ok(t, res))
	require.Equal(t, `value [secret:sign] {"v":"[secret:sign]"}`, strings.TrimSpace(res.Logs))

	res = execute(t, p, agentfleet.ExecRequest{Credentials: creds, Script: `function run() { answer("key=" + secret("sign")) }`})
	require.True(t, res.Answered)
	require.Equal(t, `"key=[secret:sign]"`, string(res.Answer))
	res = execute(t, p, agentfleet.ExecRequest{Credentials: creds, Script: `function run() { throw new Error("bad " + secret("sign")) }`})
	require.Equal(t, "Error: bad [secret:sign] (line 1:24)", failed(t, res, agentfleet.ScriptException))

	msg := failed(t, execute(t, p, agentfleet.ExecRequest{Credentials: creds, Script: `function run() { return secret("gh") }`}), agentfleet.ScriptException)
	require.Contains(t, msg, `secret: "gh" is not exposed to scripts: it is sent for you in the X-Api-Key header of HTTPS requests to example.com`)
	msg = failed(t, execute(t, p, agentfleet.ExecRequest{Credentials: creds, Script: `function run() { return secret("aws") }`}), agentfleet.ScriptException)
	require.Contains(t, msg, `secret: "aws" is not one of the secrets this agent names`)
	msg = failed(t, execute(t, p, agentfleet.ExecRequest{Script: `function run() { return secret("sign") }`}), agentfleet.ScriptException)
	require.Contains(t, msg, "secret is not defined")
}

// Every secret of the tenant is redacted by name, those the agent does
// not name too; the provider key stays [redacted].
func TestTenantSecretsRedactedByName(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	tenant := []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "stripe"}, Value: "rk_live_51Habc"}}
	res := execute(t, p, agentfleet.ExecRequest{
		Args: []byte(`{"a":"rk_live_51Habc","b":"prov-key-77"}`), TenantSecrets: tenant, Secrets: []string{"prov-key-77"},
		Script: `function run(a) { log(a.a, a.b); return a }`,
	})
	require.JSONEq(t, `{"a":"[secret:stripe]","b":"[redacted]"}`, ok(t, res))
	require.Equal(t, "[secret:stripe] [redacted]", strings.TrimSpace(res.Logs))
}

// Text shaped like a credential is redacted in logs and answers, not in
// ordinary text.
func TestCredentialShapesRedactedInLogsAndAnswers(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() {
  log("token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 and AKIAIOSFODNN7EXAMPLE; sk-learn is fine");
  answer({key: "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", note: "risk-free"});
}`})
	require.Equal(t, "token [redacted] and [redacted]; sk-learn is fine", strings.TrimSpace(res.Logs))
	require.JSONEq(t, `{"key":"[redacted]","note":"risk-free"}`, string(res.Answer))
}

func TestSecretDeclaration(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	require.NotContains(t, p.Declarations(nil, false), "secret(")
	require.Contains(t, p.Declarations(nil, true), "declare function secret(name: string): string;")
	require.Contains(t, p.Declarations(nil, true), "declare function fetch(", "secret adds to the default set")
	require.Contains(t, p.Declarations([]string{}, true), "declare function secret(")
	require.NotContains(t, DefaultPrimitives(), "secret")
	require.Error(t, CheckPrimitives([]string{"secret"}), "secret() is not listed: the agent's secrets enable it")
}

func TestCredFor(t *testing.T) {
	t.Parallel()
	c := &agentfleet.OpenSecret{Secret: agentfleet.Secret{Hosts: []string{"API.example.com.", "*.svc.example", "alt.example:8443", "std.example:443"}}}
	for raw, want := range map[string]bool{
		"https://api.example.com/x":       true,
		"https://api.example.com:444/x":   true, // the host, on any port
		"http://api.example.com/x":        false,
		"https://example.com/":            false,
		"https://evilapi.example.com/":    false,
		"https://api.example.com.evil/":   false,
		"https://a.b.svc.example/":        true,
		"https://svc.example/":            false,
		"https://alt.example:8443/":       true,
		"https://alt.example/":            false,
		"https://std.example/":            true,
		"wss://api.example.com/":          false,
		"https://api.example.com@evil.io": false,
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.Equal(t, want, credFor(c, u), raw)
	}
}
