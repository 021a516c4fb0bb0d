package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// cli runs agentctl against a real API (SQLite, embedded NATS) as the
// admin.
type cli struct{}

func newCLI(t *testing.T, mods ...func(*api.Config)) cli {
	t.Helper()
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "cli.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg := api.Config{Store: st, Bus: b, AdminToken: "admin", KeyRevocations: b, Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := api.New(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Setenv("AGENTFLEET_URL", hs.URL)
	t.Setenv("AGENTFLEET_TOKEN", "admin")
	return cli{}
}

// run runs agentctl with args and returns its exit code and output.
func (c cli) run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTenantKeysCommands(t *testing.T) {
	c := newCLI(t)
	code, _, stderr := c.run("tenants", "create", "--max-queued", "7", "acme")
	require.Equal(t, exitOK, code, stderr)

	code, out, stderr := c.run("tenants", "keys", "create", "acme", "--name", "ci")
	require.Equal(t, exitOK, code, stderr)
	var k wire.APIKeyView
	require.NoError(t, json.Unmarshal([]byte(out), &k))
	require.Equal(t, "ci", k.Name)
	require.Equal(t, []string{"admin", "submit", "read"}, k.Scopes, "no --scopes: all three")
	require.Contains(t, stderr, "(shown once): "+k.APIKey)

	code, out, stderr = c.run("tenants", "keys", "create", "acme", "--name", "producer", "--scopes", "read, submit")
	require.Equal(t, exitOK, code, stderr)
	var producer wire.APIKeyView
	require.NoError(t, json.Unmarshal([]byte(out), &producer))
	require.Equal(t, []string{"submit", "read"}, producer.Scopes)
	code, out, stderr = c.run("tenants", "keys", "revoke", "acme", producer.ID)
	require.Equal(t, exitOK, code, stderr+out)
	code, _, stderr = c.run("tenants", "keys", "create", "acme", "--name", "x", "--scopes", "write")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, `"write" is not a scope`)

	code, out, stderr = c.run("tenants", "keys", "ls", "acme")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, regexp.MustCompile(`^ID\s+NAME\s+SCOPES\s+CREATED\s+LAST USED$`), lines[0])
	require.Regexp(t, regexp.MustCompile(`^`+k.ID+`\s+ci\s+admin,submit,read\s+.*never$`), lines[1])
	require.Contains(t, lines[2], "default")
	require.NotContains(t, out, k.APIKey)

	code, out, stderr = c.run("tenants", "keys", "revoke", "acme", k.ID)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "key "+k.ID+" of acme revoked\n", out)
	code, _, stderr = c.run("tenants", "keys", "revoke", "acme", k.ID)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "has no key")

	code, out, _ = c.run("tenants", "keys", "ls", "--json", "acme")
	require.Equal(t, exitOK, code)
	var l wire.APIKeyList
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Len(t, l.Keys, 1)

	code, out, _ = c.run("tenants", "show", "acme")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"max_queued_runs": 7`)

	for _, args := range [][]string{
		{"tenants", "keys"},
		{"tenants", "keys", "create", "acme"},
		{"tenants", "keys", "create", "--name", "x", "--scopes", ",", "acme"},
		{"tenants", "keys", "ls"},
		{"tenants", "keys", "revoke", "acme"},
		{"tenants", "keys", "rotate", "acme"},
	} {
		code, _, _ := c.run(args...)
		require.Equal(t, exitUsage, code, "%v", args)
	}
}
