package loop_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
)

const (
	signValue  = "sign-VALUE-4b3a2910"
	otherValue = "other-VALUE-77aa01"
	ghValue    = "gh-VALUE-0f0e0d0c"
)

// tenantSecrets are acme's: gh and sign are its agent's (sign exposed to
// scripts), other is not.
func tenantSecrets() []agentfleet.OpenSecret {
	return []agentfleet.OpenSecret{
		{Secret: agentfleet.Secret{Tenant: "acme", Name: "gh", Hosts: []string{"api.github.com"}}, Value: ghValue},
		{Secret: agentfleet.Secret{Tenant: "acme", Name: "sign", Expose: true}, Value: signValue},
		{Secret: agentfleet.Secret{Tenant: "acme", Name: "other"}, Value: otherValue},
	}
}

// Over a whole run, no value of the tenant's secrets reaches what a turn
// records or sends - events, steps, carried args, digests, the answer,
// the prompts of the turns and of ai() - each shows as [secret:<name>]:
// one the user pasted in the task, one a script read with secret(),
// logged, sent to ai(), carried (as a key, which the digest shows) and
// answered with. The agent's exposed secret declares secret().
func TestStepRedactsTenantSecretsByName(t *testing.T) {
	t.Parallel()
	b := setup(t,
		llm.Reply{Content: js(`function run(args) {
  const k = secret("sign");
  log("k=" + k);
  const said = ai("sign this with " + k);
  const out = {said};
  out[k] = 1;
  return out;
}`)},
		llm.Reply{Content: "ai says ok"},
		llm.Reply{Content: js(`function run(args) { answer("signed with " + secret("sign") + " and AKIAIOSFODNN7EXAMPLE") }`)},
	)
	agent := agentfleet.Agent{Name: "signer", AgentSpec: agentfleet.AgentSpec{Secrets: []string{"gh", "sign"}}}
	run := agentfleet.Run{ID: "run-s", Tenant: "acme", Agent: "signer", Status: agentfleet.StatusRunning,
		Message: "sign the release; the old key was " + otherValue}
	var results []loop.TurnResult
	var steps []agentfleet.Step
	for range 3 {
		res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Steps: steps, TenantSecrets: tenantSecrets()})
		require.NoError(t, err)
		results = append(results, res)
		run.Turn, run.Args, run.Status = res.Turn, res.Args, res.Status
		steps = append(steps, res.Steps...)
		if res.Outcome == loop.OutcomeFinished {
			break
		}
	}
	require.Len(t, results, 2)
	last := results[1]
	require.Equal(t, agentfleet.StatusCompleted, last.Status)
	require.JSONEq(t, `"signed with [secret:sign] and [redacted]"`, string(last.Answer))

	var recorded strings.Builder
	for _, res := range results {
		doc, err := json.Marshal(res)
		require.NoError(t, err)
		recorded.Write(doc)
	}
	reqs := b.model.Requests()
	require.Len(t, reqs, 3)
	sent, err := json.Marshal(reqs)
	require.NoError(t, err)
	for _, v := range []string{signValue, otherValue, ghValue} {
		require.NotContains(t, recorded.String(), v, "what the turns recorded")
		require.NotContains(t, string(sent), v, "what was sent to the model")
	}
	require.Contains(t, reqs[0].Messages[1].Content, "the old key was [secret:other]", "the task")
	require.Equal(t, "sign this with [secret:sign]", reqs[1].Messages[1].Content, "the ai() prompt")
	require.Contains(t, reqs[2].Messages[len(reqs[2].Messages)-1].Content, `"[secret:sign]": number`, "the next prompt's digest")
	require.Contains(t, recorded.String(), "k=[secret:sign]", "the log, in its event and step")
	require.JSONEq(t, `{"said":"ai says ok","[secret:sign]":1}`, string(results[0].Args))

	require.Contains(t, reqs[0].Messages[0].Content, "declare function secret(name: string): string;")
}

// Without an exposed secret, secret() is not declared; an agent that
// names a secret its tenant lacks fails its run, before any model call.
func TestStepAgentSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, llm.Reply{Content: "done"})
	agent := agentfleet.Agent{Name: "gh-bot", AgentSpec: agentfleet.AgentSpec{Secrets: []string{"gh"}}}
	run := agentfleet.Run{ID: "run-g", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "m"}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, TenantSecrets: tenantSecrets()})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.NotContains(t, b.model.Requests()[0].Messages[0].Content, "secret(")

	none := setup(t) // fails on any model call
	agent.Secrets = []string{"gh", "aws_key"}
	res, err = none.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, TenantSecrets: tenantSecrets()})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusFailed, res.Status)
	require.Equal(t, "agent gh-bot names secret aws_key, which tenant acme does not have: set it (PUT /v1/secrets/aws_key) or remove it from the agent's secrets", res.Error)
	require.Equal(t, []agentfleet.EventType{agentfleet.EventStarted, agentfleet.EventUser, agentfleet.EventError, agentfleet.EventDone}, eventTypes(res.Events))
}

func TestCheckAgentSecrets(t *testing.T) {
	t.Parallel()
	require.NoError(t, agentfleet.CheckAgentSecrets(nil))
	require.NoError(t, agentfleet.CheckAgentSecrets([]string{"github_token", "k8s_2", strings.Repeat("a", 64)}))
	for names, want := range map[string]string{
		"GitHub":                 `secrets: "GitHub" is not a secret name (1 to 64 of a-z, 0-9 and _)`,
		"":                       `secrets: "" is not a secret name`,
		"a-b":                    `secrets: "a-b" is not a secret name`,
		strings.Repeat("a", 65):  "is not a secret name",
		"x,x":                    `secrets: "x" is listed twice`,
		strings.Repeat("s,", 33): "secrets: 33 names; an agent may use at most 32",
	} {
		list := strings.Split(strings.TrimSuffix(names, ","), ",")
		if strings.HasPrefix(names, "s,") {
			list = list[:0]
			for i := range 33 {
				list = append(list, "s"+strings.Repeat("x", i))
			}
		}
		err := agentfleet.CheckAgentSecrets(list)
		require.ErrorContains(t, err, want, names)
	}
}

// exampleResolver resolves example.com (one of the names in httptest's
// certificate) to loopback.
type exampleResolver struct{}

func (exampleResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "example.com" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// A turn whose script fetches from its agent's secret's host over HTTPS:
// the server gets the header, and although it echoes it back (in the
// body the script logs and returns, and in a header the script throws),
// the turn's events, steps, carried args and the next prompt hold
// [secret:api], never the value.
func TestStepCredentialEchoedBackIsRedacted(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("X-Seen", r.Header.Get("Authorization"))
		_, _ = fmt.Fprintf(w, `{"you_sent": %q}`, r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	sb, err := sandbox.New(sandbox.Config{PoolSize: 1, Network: sandbox.NetworkConfig{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: exampleResolver{}, RootCAs: roots}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	url := fmt.Sprintf("https://example.com:%d/me", srv.Listener.Addr().(*net.TCPAddr).Port)
	model := llm.NewScripted(
		llm.Reply{Content: js(`function run(args) {
  const r = fetch(args.url);
  log("body:", r.body);
  const out = r.json();
  out[out.you_sent] = true;
  return out;
}`)},
		llm.Reply{Content: js(`function run(args) { throw new Error(fetch("` + url + `").headers["x-seen"]) }`)},
		llm.Reply{Content: "done"},
	)
	eng, err := loop.New(loop.Config{Model: model, Sandbox: sb})
	require.NoError(t, err)
	const value = "api-VALUE-31415926"
	secrets := []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "api", Hosts: []string{"example.com"}}, Value: value}}
	agent := agentfleet.Agent{Name: "caller", AgentSpec: agentfleet.AgentSpec{Secrets: []string{"api"}}}
	run := agentfleet.Run{ID: "run-c", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "who am I?", Context: json.RawMessage(`{"url":"` + url + `"}`)}
	var recorded strings.Builder
	var steps []agentfleet.Step
	for range 3 {
		res, err := eng.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Steps: steps, TenantSecrets: secrets})
		require.NoError(t, err)
		doc, _ := json.Marshal(res)
		recorded.Write(doc)
		run.Turn, run.Args, run.Status = res.Turn, res.Args, res.Status
		steps = append(steps, res.Steps...)
		if res.Outcome == loop.OutcomeFinished {
			break
		}
	}
	model.AssertDone(t)
	require.Equal(t, []string{"Bearer " + value, "Bearer " + value}, got, "the server got the credential")
	sent, _ := json.Marshal(model.Requests())
	require.NotContains(t, recorded.String(), value)
	require.NotContains(t, string(sent), value)
	require.Contains(t, recorded.String(), `body: {\"you_sent\": \"Bearer [secret:api]\"}`, "the log event and step")
	require.Contains(t, recorded.String(), `Error: Bearer [secret:api]`, "the error")
	require.Contains(t, string(sent), `\"Bearer [secret:api]\": boolean`, "the carried digest in the next prompt")
}
