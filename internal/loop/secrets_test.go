package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
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
