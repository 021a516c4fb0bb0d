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

// agentctl agents apply with a YAML file naming an MCP server and an
// OpenAPI document written inline as YAML: the agent has both, the
// document as the JSON the server validated; a document with a problem
// is refused with the server's words, naming it.
func TestAgentsApplyTools(t *testing.T) {
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
	write := func(name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
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
	code, out, stderr := agentctl("agents", "apply", "-f", write("tooled.yaml", tools))
	require.Equal(t, exitOK, code, stderr)
	var a agentfleet.Agent
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
