package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/secrets"
)

// Every read command takes --json and prints one JSON document (NDJSON
// for the streams: watch, batch results); the table below names each
// command of the tree that has --json, so a new one fails here until it
// is checked.
func TestReadCommandsJSON(t *testing.T) {
	box, err := secrets.ParseKey(secrets.NewKey())
	require.NoError(t, err)
	c := newCLI(t, func(c *api.Config) { c.Secrets = box })
	must := func(args ...string) string {
		t.Helper()
		code, out, stderr := c.run(args...)
		require.Equal(t, exitOK, code, "%v: %s", args, stderr)
		return out
	}
	id := func(out string) string {
		t.Helper()
		var v struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.ID
	}
	var tenant struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(must("tenants", "create", "acme")), &tenant))
	withStdin(t, "s3cr3t-value")
	must("secrets", "set", "--tenant", "acme", "--host", "api.example.com", "token")
	must("skills", "import", "--tenant", "acme", writeSkills(t, map[string]string{"csv/SKILL.md": "---\ndescription: Sum a CSV\n---\nbody\n"}))

	// As the admin.
	admin := map[string][]string{
		"tenants show":    {"acme"},
		"tenants usage":   {"acme"},
		"tenants keys ls": {"acme"},
		"approvals ls":    {"--status", "all"},
		"secrets ls":      {"--tenant", "acme"},
		"secrets show":    {"--tenant", "acme", "token"},
		"secrets rekey":   nil,
		"sessions ls":     {"--tenant", "acme"},
		"skills ls":       {"--tenant", "acme"},
		"skills show":     {"--tenant", "acme", "csv"},
	}
	checked := map[string]bool{}
	read := func(name string, ndjson bool, args ...string) {
		t.Helper()
		args = append(append(strings.Fields(name), "--json"), args...)
		code, out, stderr := c.run(args...)
		want := exitOK
		if name == "watch" {
			want = exitCancelled // the run's end
		}
		require.Equal(t, want, code, "%v: %s", args, stderr)
		jsonParses(t, out, ndjson)
		checked[name] = true
	}
	for name, args := range admin {
		read(name, false, args...)
	}

	// As the tenant: a run in a session, cancelled (no worker runs it), a
	// batch, a trigger.
	t.Setenv("AGENTFLEET_TOKEN", tenant.APIKey)
	runID := id(must("run", "--json", "--session", "s-1", "hello"))
	checked["run"] = true
	must("runs", "cancel", runID)
	inputs := filepath.Join(t.TempDir(), "in.jsonl")
	require.NoError(t, os.WriteFile(inputs, []byte(`{"message":"a"}`+"\n"+`{"message":"b"}`+"\n"), 0o600))
	batchID := strings.TrimSpace(must("batch", "submit", inputs))
	must("batch", "cancel", batchID)
	trigger := id(must("triggers", "create", "hook"))

	read("runs ls", false)
	read("runs show", false, runID)
	read("runs steps", false, runID)
	read("watch", true, runID)
	read("sessions show", false, "s-1")
	read("batch ls", false)
	read("batch show", false, batchID)
	read("batch results", true, batchID)
	read("agents ls", false)
	read("agents show", false, "default")
	read("triggers ls", false)
	read("triggers show", false, trigger)
	read("triggers deliveries", false, trigger)

	// Not run here: they need a call waiting for approval (a worker running
	// a script), or a fleet to measure.
	for _, name := range []string{"approvals show", "approvals approve", "approvals deny", "bench"} {
		checked[name] = true
	}
	var withJSON []string
	for _, cmd := range commands() {
		if cmd.LocalFlags().Lookup("json") != nil {
			withJSON = append(withJSON, commandName(cmd))
		}
	}
	var notChecked []string
	for _, name := range withJSON {
		if !checked[name] {
			notChecked = append(notChecked, name)
		}
	}
	require.Empty(t, notChecked, "commands with --json this test does not check")
	for name := range checked {
		require.True(t, slices.Contains(withJSON, name), "%s has --json", name)
	}
}
