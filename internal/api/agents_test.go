package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestAgentLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key, other := e.tenant("acme"), e.tenant("globex")
	spec := map[string]any{
		"system": "You triage issues.", "model": "gpt-4o-mini", "primitives": []string{"fetch", "http", "ai"},
		"max_turns": 8, "max_tokens": 40000, "max_completion_tokens": 1024, "max_model_calls_per_turn": 4, "turn_timeout": "45s",
		"egress": []string{"billing.internal", "10.1.0.0/16"}, "approve": []string{"http.post", "fetch:POST"},
		"approval_timeout": "2h", "approval_callback_url": "https://hooks.example.com/approvals",
		"context_window": 128000, "summary_model": "gpt-4o-mini-summaries",
	}
	created := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/triage", key, spec), http.StatusCreated)
	require.Equal(t, agentfleet.Agent{Tenant: "acme", Name: "triage", Version: 1, AgentSpec: agentfleet.AgentSpec{
		Persona: "You triage issues.", Model: "gpt-4o-mini", Primitives: []string{"fetch", "http", "ai"},
		MaxTurns: 8, MaxTokens: 40000, MaxCompletionTokens: 1024, MaxModelCallsPerTurn: 4, TurnTimeout: agentfleet.Duration(45 * time.Second),
		Egress: []string{"billing.internal", "10.1.0.0/16"}, Approve: []string{"http.post", "fetch:POST"},
		ApprovalTimeout: agentfleet.Duration(2 * time.Hour), ApprovalCallbackURL: "https://hooks.example.com/approvals",
		ContextWindow: 128000, SummaryModel: "gpt-4o-mini-summaries",
	}, CreatedAt: created.CreatedAt, UpdatedAt: created.UpdatedAt}, created)
	raw := rawJSON(t, e.do("GET", "/v1/agents/triage", key, nil).body)
	require.JSONEq(t, `"You triage issues."`, string(raw["system"]), "the persona is system on the wire")
	require.JSONEq(t, `"2h0m0s"`, string(raw["approval_timeout"]))

	// The same spec again (even as GET shows it, read-only fields and
	// all) changes nothing.
	again := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/triage", key, created), http.StatusOK)
	require.Equal(t, created, again)

	// A replacement is whole and a new version; version 1 stays.
	v2 := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/triage", key, map[string]any{"name": "triage", "system": "You triage, briefly."}), http.StatusOK)
	require.Equal(t, 2, v2.Version)
	require.Nil(t, v2.Primitives, "left out: all primitives")
	require.Equal(t, agentfleet.ApprovalTimeoutDefault, v2.ApprovalTimeout, "approval_timeout defaults to 24h")
	require.Equal(t, created.CreatedAt, v2.CreatedAt)
	old := decode[agentfleet.Agent](t, e.do("GET", "/v1/agents/triage?version=1", key, nil), http.StatusOK)
	require.Equal(t, "You triage issues.", old.Persona)
	requireError(t, e.do("GET", "/v1/agents/triage?version=9", key, nil), http.StatusNotFound, "not_found", "no version 9")
	requireError(t, e.do("GET", "/v1/agents/triage?version=x", key, nil), http.StatusBadRequest, "bad_request", "version")

	list := decode[wire.AgentList](t, e.do("GET", "/v1/agents", key, nil), http.StatusOK)
	require.Equal(t, []string{"triage", agentfleet.DefaultAgent}, names(list.Agents), "newest first, the default agent included")
	page := decode[wire.AgentList](t, e.do("GET", "/v1/agents?limit=1", key, nil), http.StatusOK)
	require.Len(t, page.Agents, 1)
	require.NotEmpty(t, page.NextCursor)
	rest := decode[wire.AgentList](t, e.do("GET", "/v1/agents?limit=1&cursor="+page.NextCursor, key, nil), http.StatusOK)
	require.Equal(t, []string{agentfleet.DefaultAgent}, names(rest.Agents))
	requireError(t, e.do("GET", "/v1/agents?cursor=bogus", key, nil), http.StatusBadRequest, "bad_request", "cursor")

	// Another tenant sees nothing of it; the admin token has no agents.
	requireError(t, e.do("GET", "/v1/agents/triage", other, nil), http.StatusNotFound, "not_found")
	require.Equal(t, []string{agentfleet.DefaultAgent}, names(decode[wire.AgentList](t, e.do("GET", "/v1/agents", other, nil), http.StatusOK).Agents))
	requireError(t, e.do("GET", "/v1/agents", adminToken, nil), http.StatusUnprocessableEntity, "unprocessable", "api key")

	requireError(t, e.do("DELETE", "/v1/agents/default", key, nil), http.StatusUnprocessableEntity, "unprocessable", "cannot be deleted")
	requireError(t, e.do("DELETE", "/v1/agents/ghost", key, nil), http.StatusNotFound, "not_found", "ghost")
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/agents/triage", key, nil).status)
	requireError(t, e.do("GET", "/v1/agents/triage", key, nil), http.StatusNotFound, "not_found", "no agent")
	require.Equal(t, "You triage, briefly.", decode[agentfleet.Agent](t, e.do("GET", "/v1/agents/triage?version=2", key, nil), http.StatusOK).Persona,
		"a deleted agent's versions stay for the runs admitted under them")
}

func names(as []agentfleet.Agent) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}

func TestAgentPutRefusesWhatNoWorkerServes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	for name, c := range map[string]struct {
		path   string
		body   any
		status int
		want   string
	}{
		"unknown field":      {"/v1/agents/a", `{"sytem": "x"}`, http.StatusBadRequest, `unknown field "sytem"`},
		"bad name":           {"/v1/agents/a.b", map[string]any{}, http.StatusUnprocessableEntity, "not valid"},
		"other name":         {"/v1/agents/a", map[string]any{"name": "b"}, http.StatusUnprocessableEntity, "must match"},
		"other tenant":       {"/v1/agents/a", map[string]any{"tenant": "globex"}, http.StatusUnprocessableEntity, "tenant"},
		"unknown primitive":  {"/v1/agents/a", map[string]any{"primitives": []string{"fetch", "exec"}}, http.StatusUnprocessableEntity, "primitives: unknown primitive(s) exec"},
		"primitive twice":    {"/v1/agents/a", map[string]any{"primitives": []string{"ai", "ai"}}, http.StatusUnprocessableEntity, "twice"},
		"bad approve rule":   {"/v1/agents/a", map[string]any{"approve": []string{"http.post https://u@api.example.com/*"}}, http.StatusUnprocessableEntity, "cannot have a user name"},
		"bad egress":         {"/v1/agents/a", map[string]any{"egress": []string{"not a host!"}}, http.StatusUnprocessableEntity, "egress"},
		"metadata egress":    {"/v1/agents/a", map[string]any{"egress": []string{"169.254.0.0/16"}}, http.StatusUnprocessableEntity, "metadata"},
		"loopback egress":    {"/v1/agents/a", map[string]any{"egress": []string{"10.0.0.0/8", "127.0.0.1"}}, http.StatusUnprocessableEntity, `egress: egress entry "127.0.0.1" is a loopback address`},
		"localhost egress":   {"/v1/agents/a", map[string]any{"egress": []string{"localhost"}}, http.StatusUnprocessableEntity, `"localhost" names the local machine`},
		"EKS egress":         {"/v1/agents/a", map[string]any{"egress": []string{"169.254.170.23"}}, http.StatusUnprocessableEntity, `"169.254.170.23" is a cloud metadata address`},
		"GCP v6 egress":      {"/v1/agents/a", map[string]any{"egress": []string{"fd20:ce::254"}}, http.StatusUnprocessableEntity, `"fd20:ce::254" is a cloud metadata address`},
		"Azure egress":       {"/v1/agents/a", map[string]any{"egress": []string{"168.63.129.16"}}, http.StatusUnprocessableEntity, `"168.63.129.16" is a cloud metadata address`},
		"spelled metadata":   {"/v1/agents/a", map[string]any{"egress": []string{"169.254.169.254.nip.io"}}, http.StatusUnprocessableEntity, `"169.254.169.254.nip.io" spells the address 169.254.169.254`},
		"public egress":      {"/v1/agents/a", map[string]any{"egress": []string{"0.0.0.0/0"}}, http.StatusUnprocessableEntity, `"0.0.0.0/0" holds the cloud metadata address`},
		"bad duration":       {"/v1/agents/a", `{"approval_timeout": "a day"}`, http.StatusBadRequest, `field "approval_timeout" must be a duration like "90s"`},
		"number duration":    {"/v1/agents/a", `{"turn_timeout": 30}`, http.StatusBadRequest, `field "turn_timeout" must be a duration`},
		"negative limit":     {"/v1/agents/a", map[string]any{"max_turns": -1}, http.StatusUnprocessableEntity, "negative"},
		"long system":        {"/v1/agents/a", map[string]any{"system": strings.Repeat("p", 40<<10)}, http.StatusUnprocessableEntity, "system"},
		"private callback":   {"/v1/agents/a", map[string]any{"approval_callback_url": "http://127.0.0.1:9/x"}, http.StatusUnprocessableEntity, "approval_callback_url"},
		"relative callback":  {"/v1/agents/a", map[string]any{"approval_callback_url": "/x"}, http.StatusUnprocessableEntity, "approval_callback_url"},
		"control in model":   {"/v1/agents/a", map[string]any{"model": "gpt\n4"}, http.StatusUnprocessableEntity, "model"},
		"egress with commas": {"/v1/agents/a", map[string]any{"egress": []string{"a.internal,b.internal"}}, http.StatusUnprocessableEntity, "own entry"},
		"small window":       {"/v1/agents/a", map[string]any{"context_window": 2047}, http.StatusUnprocessableEntity, "context_window: 2047 tokens is not a model's window; give 2048 to 10000000"},
		"huge window":        {"/v1/agents/a", map[string]any{"context_window": 10_000_001}, http.StatusUnprocessableEntity, "context_window: 10000001"},
		"negative window":    {"/v1/agents/a", map[string]any{"context_window": -1}, http.StatusUnprocessableEntity, "context_window"},
		"text window":        {"/v1/agents/a", `{"context_window": "32k"}`, http.StatusBadRequest, "context_window"},
		"summary model":      {"/v1/agents/a", map[string]any{"summary_model": "mini\tfast"}, http.StatusUnprocessableEntity, `summary_model "mini\tfast" is not a model name`},
		"long summary model": {"/v1/agents/a", map[string]any{"summary_model": strings.Repeat("m", 201)}, http.StatusUnprocessableEntity, "summary_model"},
		"mcp bad name":       {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "Git-Hub", "url": "https://mcp.example.com/mcp"}}}, http.StatusUnprocessableEntity, `mcp[0].name "Git-Hub"`},
		"mcp twice":          {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "gh", "url": "https://mcp.example.com/mcp"}, map[string]any{"name": "gh", "url": "https://b.example.com/mcp"}}}, http.StatusUnprocessableEntity, `mcp[1].name "gh" is listed twice`},
		"mcp no url":         {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "gh"}}}, http.StatusUnprocessableEntity, "mcp[0].url: give the server's streamable HTTP endpoint"},
		"mcp ftp url":        {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "gh", "url": "ftp://mcp.example.com/mcp"}}}, http.StatusUnprocessableEntity, `mcp[0].url: "ftp://mcp.example.com/mcp" is not an http(s) URL`},
		"mcp secret":         {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "gh", "url": "https://mcp.example.com/mcp", "secret": "tok"}}}, http.StatusUnprocessableEntity, `mcp[0].secret "tok" is not one of the agent's secrets`},
		"mcp empty tool":     {"/v1/agents/a", map[string]any{"mcp": []any{map[string]any{"name": "gh", "url": "https://mcp.example.com/mcp", "tools": []string{"get_issue", " "}}}}, http.StatusUnprocessableEntity, `mcp[0].tools[1] " " is not a tool name`},
		"mcp approve rule":   {"/v1/agents/a", map[string]any{"approve": []string{"mcp:gh"}}, http.StatusUnprocessableEntity, "mcp:<server>.<tool>"},
		"openapi bad name":   {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "Bill", "spec": petSpec}}}, http.StatusUnprocessableEntity, `openapi[0].name "Bill"`},
		"openapi both":       {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": petSpec, "spec_url": "https://x.example.com/o.json"}}}, http.StatusUnprocessableEntity, "openapi[0]: give spec or spec_url, not both"},
		"openapi spec_url":   {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec_url": "ftp://x.example.com/o.json"}}}, http.StatusUnprocessableEntity, `openapi[0].spec_url: "ftp://x.example.com/o.json" is not an http(s) URL`},
		"spec_url loopback":  {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec_url": "http://127.0.0.1:9/o.json"}}}, http.StatusUnprocessableEntity, "openapi[0].spec_url:"},
		"openapi bad yaml":   {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": "openapi: [3"}}}, http.StatusUnprocessableEntity, "openapi[0].spec:"},
		"openapi v2":         {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": map[string]any{"swagger": "2.0", "info": map[string]any{"title": "t", "version": "1"}, "paths": map[string]any{}}}}}, http.StatusUnprocessableEntity, "openapi[0].spec:"},
		"openapi secret":     {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": petSpec, "secret": "tok"}}}, http.StatusUnprocessableEntity, `openapi[0].secret "tok" is not one of the agent's secrets`},
		"openapi twice":      {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": petSpec}, map[string]any{"name": "b", "spec": petSpec}}}, http.StatusUnprocessableEntity, `openapi[1].name "b" is listed twice`},
		"openapi base_url":   {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": petSpec, "base_url": "ftp://x"}}}, http.StatusUnprocessableEntity, "openapi[0].base_url"},
		"openapi too big":    {"/v1/agents/a", map[string]any{"openapi": []any{map[string]any{"name": "b", "spec": strings.Repeat(" ", 1<<20+1)}}}, http.StatusUnprocessableEntity, "over the limit of 1 MiB"},
		"api approve rule":   {"/v1/agents/a", map[string]any{"approve": []string{"api:billing"}}, http.StatusUnprocessableEntity, "api:<module>.<operationId>"},
	} {
		r := e.do("PUT", c.path, key, c.body)
		code := map[int]string{http.StatusBadRequest: "bad_request", http.StatusUnprocessableEntity: "unprocessable"}[c.status]
		requireError(t, r, c.status, code, c.want)
		_ = name
	}
	list := decode[wire.AgentList](t, e.do("GET", "/v1/agents", key, nil), http.StatusOK)
	require.Equal(t, []string{agentfleet.DefaultAgent}, names(list.Agents), "nothing refused was stored")
}

func TestRunKeepsItsAgentVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/writer", key, map[string]any{"system": "one"}), http.StatusCreated)
	first := e.createRun(key, map[string]any{"agent": "writer", "message": "go"})
	require.Equal(t, 1, first.AgentVersion)
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/writer", key, map[string]any{"system": "two"}), http.StatusOK)
	second := e.createRun(key, map[string]any{"agent": "writer", "message": "go"})
	require.Equal(t, 2, second.AgentVersion)
	require.Equal(t, 1, e.getRun(key, first.ID).AgentVersion, "a replacement never changes an admitted run")

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/agents/writer", key, nil).status)
	requireError(t, e.do("POST", "/v1/runs", key, map[string]any{"agent": "writer", "message": "go"}),
		http.StatusUnprocessableEntity, "unprocessable", `unknown agent "writer"`)
	require.Equal(t, 2, e.getRun(key, second.ID).AgentVersion, "nor does a delete")
}

// A dispatcher that still takes a deleted agent for existing (another
// dispatcher deleted it, within its cache's life) is set right by the
// store.
func TestRunOfAnAgentDeletedElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/writer", key, map[string]any{}), http.StatusCreated)
	e.createRun(key, map[string]any{"agent": "writer", "message": "go"}) // caches it
	require.NoError(t, e.store.AgentDelete(e.ctx, store.AgentDeleteParams{Tenant: "acme", Name: "writer"}))
	requireError(t, e.do("POST", "/v1/runs", key, map[string]any{"agent": "writer", "message": "go"}),
		http.StatusUnprocessableEntity, "unprocessable", `unknown agent "writer"`)
}

func TestTriggerOfADeletedAgentRejectsDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/triage", key, map[string]any{"system": "You triage."}), http.StatusCreated)
	tv := e.createTrigger(key, map[string]any{"name": "issues", "scheme": "github", "agent": "triage", "message": "triage {{.payload.n}}"})
	ok := e.signed(tv, tv.Secret, "d-1", "issues", []byte(`{"n": 1}`))
	require.Equal(t, http.StatusAccepted, ok.status, "answer: %s", ok)

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/agents/triage", key, nil).status)
	r := e.signed(tv, tv.Secret, "d-2", "issues", []byte(`{"n": 2}`))
	requireError(t, r, http.StatusUnprocessableEntity, "unprocessable", `unknown agent "triage"`)
	log := e.deliveries(key, tv.ID)
	require.Equal(t, "d-2", log[0].Delivery)
	require.EqualValues(t, store.DeliveryRejected, log[0].Outcome)
	require.Contains(t, log[0].Reason, `the trigger's agent "triage" does not exist`)
	require.Empty(t, log[0].RunID)
}

// petSpec is an OpenAPI 3 document in YAML, as a string.
const petSpec = `openapi: 3.0.3
info: {title: pets, version: "1"}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /pets/{id}:
    get:
      operationId: getPet
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`

// An agent's OpenAPI documents, inline as YAML or as a JSON object, are
// stored as given, with the approve rules that name their operations.
func TestAgentOpenAPIModules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	obj := map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "b", "version": "1"},
		"paths": map[string]any{"/refunds": map[string]any{"post": map[string]any{"operationId": "createRefund", "responses": map[string]any{"201": map[string]any{"description": "made"}}}}}}
	spec := map[string]any{
		"openapi": []any{map[string]any{"name": "pets", "spec": petSpec}, map[string]any{"name": "billing", "spec": obj, "base_url": "https://billing.example.com"}},
		"approve": []string{"api:billing.createRefund", "api:pets.*"},
	}
	a := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/tools", key, spec), http.StatusCreated)
	require.Len(t, a.OpenAPI, 2)
	require.Equal(t, "pets", a.OpenAPI[0].Name)
	var yaml string
	require.NoError(t, json.Unmarshal(a.OpenAPI[0].Spec, &yaml))
	require.Equal(t, petSpec, yaml)
	require.Equal(t, "https://billing.example.com", a.OpenAPI[1].BaseURL)
	got := decode[agentfleet.Agent](t, e.do("GET", "/v1/agents/tools", key, nil), http.StatusOK)
	require.Equal(t, a.OpenAPI[1].Name, got.OpenAPI[1].Name)
	require.JSONEq(t, string(a.OpenAPI[1].Spec), string(got.OpenAPI[1].Spec))

	// No server in the document and no base_url: nowhere to send.
	delete(obj, "servers")
	r := e.do("PUT", "/v1/agents/tools", key, map[string]any{"openapi": []any{map[string]any{"name": "billing", "spec": obj}}})
	requireError(t, r, http.StatusUnprocessableEntity, "unprocessable", "openapi[0].base_url: the document names no server")
}

// An OpenAPI module's secret must be one its requests carry: HTTPS, to
// one of the secret's hosts; otherwise the agent is refused saying why.
func TestAgentOpenAPIModuleSecretReachesItsHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBox(newBox(t, secrets.NewKey()), nil))
	key := e.tenant("acme")
	r := e.do("PUT", "/v1/secrets/pets_key", key, map[string]any{"value": "pets-key-0123456789", "hosts": []string{"pets.example.com"}})
	require.Equal(t, http.StatusCreated, r.status, r.String())
	mod := func(base string) map[string]any {
		return map[string]any{"secrets": []string{"pets_key"},
			"openapi": []any{map[string]any{"name": "pets", "spec": petSpec, "secret": "pets_key", "base_url": base}}}
	}
	decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/pets", key, mod("")), http.StatusCreated)
	requireError(t, e.do("PUT", "/v1/agents/pets", key, mod("https://other.example.com")), http.StatusUnprocessableEntity, "unprocessable",
		`openapi[0].secret "pets_key" is sent only to pets.example.com, and the module's requests go to other.example.com`)
	requireError(t, e.do("PUT", "/v1/agents/pets", key, mod("http://pets.example.com")), http.StatusUnprocessableEntity, "unprocessable",
		"over plain http, and a secret is sent over HTTPS only")
}

// An agent's MCP servers are stored and shown as given; a server's secret
// must reach it (HTTPS, one of the secret's hosts), else the agent is
// refused naming the field.
func TestAgentMCPServers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBox(newBox(t, secrets.NewKey()), nil))
	key := e.tenant("acme")
	r := e.do("PUT", "/v1/secrets/gh_token", key, map[string]any{"value": "gh-token-0123456789", "hosts": []string{"mcp.example.com"}})
	require.Equal(t, http.StatusCreated, r.status, r.String())
	srv := func(url string) map[string]any {
		return map[string]any{"secrets": []string{"gh_token"}, "approve": []string{"mcp:gh.create_issue", "mcp:gh.*"},
			"mcp": []any{map[string]any{"name": "gh", "url": url, "secret": "gh_token", "tools": []string{"create_issue", "get-issue"}}}}
	}
	a := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/gh", key, srv("https://mcp.example.com/mcp")), http.StatusCreated)
	require.Equal(t, []agentfleet.MCPServer{{Name: "gh", URL: "https://mcp.example.com/mcp", Secret: "gh_token", Tools: []string{"create_issue", "get-issue"}}}, a.MCP)
	got := decode[agentfleet.Agent](t, e.do("GET", "/v1/agents/gh", key, nil), http.StatusOK)
	require.Equal(t, a.MCP, got.MCP)
	requireError(t, e.do("PUT", "/v1/agents/gh", key, srv("https://other.example.com/mcp")), http.StatusUnprocessableEntity, "unprocessable",
		`mcp[0].secret "gh_token" is sent only to mcp.example.com, and the server is at other.example.com`)
	requireError(t, e.do("PUT", "/v1/agents/gh", key, srv("http://mcp.example.com/mcp")), http.StatusUnprocessableEntity, "unprocessable",
		`mcp[0].secret "gh_token": the server http://mcp.example.com/mcp is plain http`)
}

// A spec_url is fetched at apply time through the egress guard (here
// opened to loopback by the operator), stored with the agent, and shown
// as the URL alone, so the agent as shown puts back; a URL that does not
// answer a document is refused naming it.
func TestAgentOpenAPISpecURL(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/pets.yaml":
			_, _ = w.Write([]byte(petSpec))
		case "/broken.yaml":
			_, _ = w.Write([]byte("openapi: 3.0.3\npaths: [nope"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, func(c *api.Config) {
		c.Egress = egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	key := e.tenant("acme")
	body := map[string]any{"openapi": []any{map[string]any{"name": "pets", "spec_url": srv.URL + "/pets.yaml"}}}
	a := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/pets", key, body), http.StatusCreated)
	require.Equal(t, srv.URL+"/pets.yaml", a.OpenAPI[0].SpecURL)
	require.Empty(t, a.OpenAPI[0].Spec, "shown as its URL")
	stored, err := e.store.AgentGetByName(e.ctx, store.AgentGetByNameParams{Tenant: "acme", Name: "pets"})
	require.NoError(t, err)
	var doc string
	require.NoError(t, json.Unmarshal(stored.OpenAPI[0].Spec, &doc))
	require.Equal(t, petSpec, doc, "the document fetched is what runs use")

	// As shown, put back: fetched again, and unchanged.
	again := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/pets", key, a), http.StatusOK)
	require.Equal(t, 1, again.Version)
	require.EqualValues(t, 2, hits.Load())

	requireError(t, e.do("PUT", "/v1/agents/pets", key, map[string]any{"openapi": []any{map[string]any{"name": "pets", "spec_url": srv.URL + "/gone.yaml"}}}),
		http.StatusUnprocessableEntity, "unprocessable", "openapi[0].spec_url: fetching "+srv.URL+"/gone.yaml answered 404")
	requireError(t, e.do("PUT", "/v1/agents/pets", key, map[string]any{"openapi": []any{map[string]any{"name": "pets", "spec_url": srv.URL + "/broken.yaml"}}}),
		http.StatusUnprocessableEntity, "unprocessable", "openapi[0].spec_url: the document at "+srv.URL+"/broken.yaml:")
}
