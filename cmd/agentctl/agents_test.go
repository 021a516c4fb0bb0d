package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// agentctl agents apply, ls, show and rm against the API: a YAML file
// and a JSON file define the same fields, a name in the file must match
// the argument, applying a file again is no new version, and what the
// server refuses is shown as it said it.
func TestAgentsCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := bustest.Connect(t, bustest.StartServer(t))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "cli.db")})
	require.NoError(t, err)
	defer st.Close()
	srv, err := api.New(api.Config{Store: st, Bus: b, AdminToken: "admin", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	tv, err := client.New(hs.URL, "admin").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_URL", hs.URL)
	t.Setenv("AGENTFLEET_TOKEN", tv.APIKey)
	agentctl := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}

	yamlFile := write("triage.yaml", `name: triage
system: |
  You triage GitHub issues.
model: gpt-4o-mini
primitives: [fetch, http, ai]
max_turns: 8
max_model_calls_per_turn: 4
turn_timeout: 45s
egress: [billing.internal, 10.1.0.0/16]
approve: [http.post, "fetch:POST"]
approval_timeout: 2h
`)
	code, out, stderr := agentctl("agents", "apply", "-f", yamlFile)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "agent triage created (version 1)")
	var a agentfleet.Agent
	require.NoError(t, json.Unmarshal([]byte(out), &a))
	require.Equal(t, agentfleet.AgentSpec{Persona: "You triage GitHub issues.\n", Model: "gpt-4o-mini", Primitives: []string{"fetch", "http", "ai"},
		MaxTurns: 8, MaxModelCallsPerTurn: 4, TurnTimeout: agentfleet.Duration(45 * time.Second),
		Egress: []string{"billing.internal", "10.1.0.0/16"}, Approve: []string{"http.post", "fetch:POST"},
		ApprovalTimeout: agentfleet.Duration(2 * time.Hour)}, a.AgentSpec)

	code, _, stderr = agentctl("agents", "apply", "-f", yamlFile, "triage")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "agent triage unchanged (version 1)")

	// The same agent as JSON, changed: version 2. What `agents show`
	// prints can be applied back.
	jsonFile := write("triage.json", `{"system": "You triage, briefly.", "primitives": ["ai"]}`)
	code, _, stderr = agentctl("agents", "apply", "-f", jsonFile, "triage")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "agent triage is now version 2 (was 1)")
	code, out, stderr = agentctl("agents", "show", "--version", "1", "triage")
	require.Equal(t, exitOK, code)
	require.Contains(t, stderr, "profile (context_window unset, the defaults): prompt budget 24000 tokens; history over 18000 folds into a summary (up to 1500 tokens, by gpt-4o-mini) keeping 9000 verbatim; logs 16384 bytes a turn; reply reserve 2048")
	code, _, stderr = agentctl("agents", "apply", "-f", write("v1.json", out))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "agent triage is now version 3 (was 2)")
	got, err := client.New(hs.URL, tv.APIKey).GetAgent(ctx, "triage", 0)
	require.NoError(t, err)
	require.Equal(t, a.AgentSpec, got.AgentSpec, "version 3 is version 1 again")

	// A context window derives the profile `agents show` prints.
	code, _, stderr = agentctl("agents", "apply", "-f", write("window.yaml", "name: long\nmodel: big\ncontext_window: 128000\nsummary_model: small\n"))
	require.Equal(t, exitOK, code, stderr)
	code, out, stderr = agentctl("agents", "show", "long")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "profile (context_window 128000): prompt budget 104000 tokens; history over 78000 folds into a summary (up to 4096 tokens, by small) keeping 39000 verbatim; logs 39000 bytes a turn; reply reserve 8000")
	require.NoError(t, json.Unmarshal([]byte(out), &a), "stdout is the agent alone")
	require.Equal(t, 128000, a.ContextWindow)
	require.Equal(t, "small", a.SummaryModel)
	code, _, stderr = agentctl("agents", "apply", "-f", write("tiny.yaml", "name: tiny\ncontext_window: 1000\n"))
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "context_window: 1000 tokens is not a model's window")
	code, _, _ = agentctl("agents", "rm", "long")
	require.Equal(t, exitOK, code)

	code, out, _ = agentctl("agents", "ls")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `triage\s+3\s+gpt-4o-mini\s+fetch,http,ai\s+http.post,fetch:POST`, out)
	require.Regexp(t, `default\s+1\s+-\s+\*\s+-`, out)

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"agents", "apply", "-f", yamlFile, "other"}, exitUsage, `names agent "triage", not "other"`},
		{[]string{"agents", "apply", "-f", jsonFile}, exitUsage, "has no name"},
		{[]string{"agents", "apply", "triage"}, exitUsage, "-f FILE"},
		{[]string{"agents", "apply", "-f", write("bad.yaml", "system: [unclosed")}, exitUsage, "not valid YAML"},
		{[]string{"agents", "apply", "-f", write("list.yaml", "- a\n- b\n")}, exitUsage, "one mapping"},
		{[]string{"agents", "apply", "-f", write("typo.yaml", "name: x\nsytem: hi\n")}, exitFailed, `unknown field "sytem"`},
		{[]string{"agents", "apply", "-f", write("prim.yaml", "name: x\nprimitives: [exec]\n")}, exitFailed, "unknown primitive(s) exec"},
		{[]string{"agents", "rm", "default"}, exitFailed, "cannot be deleted"},
		{[]string{"agents", "show", "ghost"}, exitFailed, `no agent "ghost"`},
		{[]string{"agents", "frob"}, exitUsage, "unknown agents subcommand"},
	} {
		code, _, stderr := agentctl(c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}

	code, out, _ = agentctl("agents", "rm", "triage")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "agent triage deleted")
	code, _, _ = agentctl("agents", "show", "triage")
	require.Equal(t, exitFailed, code)
	code, _, _ = agentctl("agents", "show", "--version", "2", "triage")
	require.Equal(t, exitOK, code, "its versions stay for the runs admitted under them")

	// An MCP server and an OpenAPI document written inline as YAML: the
	// agent has both, the document as the JSON the server validated; a
	// document with a problem is refused with the server's words.
	const tools = `name: tooled
egress: [linear.example.com, billing.example.com]
mcp:
  - name: linear
    url: https://linear.example.com/mcp
    tools: [search_issues, create_issue]
openapi:
  - name: billing
    base_url: https://billing.example.com
    spec:
      openapi: 3.0.3
      info: {title: billing, version: "1"}
      paths:
        /invoices/{id}:
          get:
            operationId: getInvoice
            parameters:
              - {name: id, in: path, required: true, schema: {type: string}}
            responses:
              "200": {description: the invoice}
`
	code, out, stderr = agentctl("agents", "apply", "-f", write("tooled.yaml", tools))
	require.Equal(t, exitOK, code, stderr)
	a = agentfleet.Agent{}
	require.NoError(t, json.Unmarshal([]byte(out), &a))
	require.Equal(t, []agentfleet.MCPServer{{Name: "linear", URL: "https://linear.example.com/mcp", Tools: []string{"search_issues", "create_issue"}}}, a.MCP)
	require.Len(t, a.OpenAPI, 1)
	require.Equal(t, "billing", a.OpenAPI[0].Name)
	require.Equal(t, "https://billing.example.com", a.OpenAPI[0].BaseURL)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(a.OpenAPI[0].Spec, &doc), "the YAML document is stored as JSON: %s", a.OpenAPI[0].Spec)
	require.Equal(t, "getInvoice", doc.Paths["/invoices/{id}"]["get"].OperationID)

	// A document with a reference to nothing is refused, naming it.
	bad := bytes.Replace([]byte(tools), []byte("schema: {type: string}"), []byte("schema: {$ref: '#/components/schemas/Missing'}"), 1)
	code, _, stderr = agentctl("agents", "apply", "-f", write("bad.yaml", string(bad)))
	require.Equal(t, exitFailed, code, stderr)
	require.Contains(t, stderr, "openapi[0].spec: component `#/components/schemas/Missing` does not exist")
	require.Contains(t, stderr, "HTTP 422")
}
