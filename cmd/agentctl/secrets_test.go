package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/wire"
)

// withStdin makes s what `secrets set` reads as standard input.
func withStdin(t *testing.T, s string) {
	t.Helper()
	old := secretStdin
	secretStdin = strings.NewReader(s)
	t.Cleanup(func() { secretStdin = old })
}

// agentctl secrets set, ls, show, rm and rekey against the API: the
// value comes from standard input or a file, less one trailing newline,
// and never back; the admin token names the tenant with --tenant; a
// rekey after the key is rotated rewrites every value under the new key.
func TestSecretsCommands(t *testing.T) {
	oldKey := secrets.NewKey()
	box, err := secrets.ParseKey(oldKey)
	require.NoError(t, err)
	var cfg api.Config
	c := newCLI(t, func(c *api.Config) { c.Secrets = box; cfg = *c })
	code, _, stderr := c.run("tenants", "create", "acme")
	require.Equal(t, exitOK, code, stderr)

	const value = "ghp_FROMSTDIN0123456789"
	withStdin(t, value+"\n")
	code, out, stderr := c.run("secrets", "set", "--tenant", "acme", "--host", "api.github.com", "--host", "uploads.github.com", "github_token")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "secret github_token created (version 1)")
	require.NotContains(t, out+stderr, value)
	var sec agentfleet.Secret
	require.NoError(t, json.Unmarshal([]byte(out), &sec))
	require.Equal(t, []string{"api.github.com", "uploads.github.com"}, sec.Hosts)
	require.Equal(t, "Authorization", sec.Header)
	opened := func(name string) string {
		t.Helper()
		all, err := cfg.Store.SecretSealedList(t.Context(), "acme")
		require.NoError(t, err)
		for _, s := range all {
			if s.Name == name {
				v, err := box.Open(s.Sealed, secrets.SecretAD("acme", name))
				require.NoError(t, err)
				return v
			}
		}
		t.Fatalf("no secret %s", name)
		return ""
	}
	require.Equal(t, value, opened("github_token"), "one trailing newline stripped, nothing else")

	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte("sk-FROMFILE\r\n"), 0o600))
	code, _, stderr = c.run("secrets", "set", "github_token", "--tenant", "acme", "--host", "api.github.com",
		"--header", "X-Api-Key", "--format", "{value}", "--expose", "--from-file", file)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "secret github_token is now version 2")
	require.Equal(t, "sk-FROMFILE", opened("github_token"))

	code, out, stderr = c.run("secrets", "ls", "--tenant", "acme")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `NAME\s+HOSTS\s+HEADER\s+EXPOSE\s+VERSION\s+UPDATED`, out)
	require.Regexp(t, `github_token\s+api.github.com\s+X-Api-Key\s+true\s+2\s`, out)
	code, out, _ = c.run("secrets", "ls", "--tenant", "acme", "--json")
	require.Equal(t, exitOK, code)
	var list wire.SecretList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Secrets, 1)
	code, out, _ = c.run("secrets", "show", "--tenant", "acme", "github_token")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"version": 2`)
	require.NotContains(t, out, "sk-FROMFILE")

	// A tenant's own key needs no --tenant.
	k, err := client.New(os.Getenv("AGENTFLEET_URL"), "admin").CreateKey(t.Context(), "acme", "ops", "admin")
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_TOKEN", k.APIKey)
	code, out, stderr = c.run("secrets", "ls")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "github_token")
	t.Setenv("AGENTFLEET_TOKEN", "admin")

	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"", []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com", "empty"}, exitUsage, "is empty"},
		{"\n", []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com", "empty"}, exitUsage, "is empty"},
		{"v-longer-value", []string{"secrets", "set", "--tenant", "acme", "nohost"}, exitUsage, "needs --host"},
		{"v-longer-value", []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com"}, exitUsage, "one secret NAME"},
		{"v-longer-value", []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com", "--from-file", filepath.Join(t.TempDir(), "nope"), "x"}, exitUsage, "no such file"},
		{"v-longer-value", []string{"secrets", "set", "--tenant", "acme", "--host", "https://a.example.com", "x"}, exitFailed, "not a bare host name"},
		{"v-longer-value", []string{"secrets", "set", "--host", "a.example.com", "x"}, exitFailed, "?tenant="},
		{strings.Repeat("x", api.SecretValueMax+1), []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com", "big"}, exitUsage, "longer than 16384 bytes"},
		{"short", []string{"secrets", "set", "--tenant", "acme", "--host", "a.example.com", "short"}, exitFailed, "at least 8"},
		{"", []string{"secrets", "show", "--tenant", "acme", "ghost"}, exitFailed, `no secret "ghost"`},
		{"", []string{"secrets", "frob"}, exitUsage, "unknown secrets subcommand"},
		{"", []string{"secrets"}, exitUsage, "needs a subcommand"},
	} {
		withStdin(t, tc.stdin)
		code, _, stderr := c.run(tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
	}

	// Rotate: the dispatcher now seals under a new key and still opens
	// the old one's values; rekey rewrites them (and the callback secret).
	first := os.Getenv("AGENTFLEET_URL")
	newKey := secrets.NewKey()
	rotated, err := secrets.ParseKeys(newKey, oldKey)
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_URL", serveOver(t, cfg, rotated))
	code, out, stderr = c.run("secrets", "rekey")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "rewrote 2 sealed values under key "+rotated.KeyID()+" (0 were under it already)")
	code, out, _ = c.run("secrets", "rekey", "--json")
	require.Equal(t, exitOK, code)
	var rep wire.RekeyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, wire.RekeyReport{KeyID: rotated.KeyID(), Current: 2, Unopened: []wire.SealedRef{}}, rep)

	// A value sealed under the old key after it was dropped from the
	// fleet (a dispatcher not yet restarted) is reported, and kept.
	t.Setenv("AGENTFLEET_URL", first)
	withStdin(t, "under-the-old-key")
	code, _, stderr = c.run("secrets", "set", "--tenant", "acme", "--host", "a.example.com", "another")
	require.Equal(t, exitOK, code, stderr)
	only, err := secrets.ParseKey(newKey)
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_URL", serveOver(t, cfg, only))
	code, _, stderr = c.run("secrets", "rekey")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "not opened: secret acme/another")
	require.Contains(t, stderr, "1 sealed value(s) open under no key")
	require.Equal(t, "under-the-old-key", opened("another"))

	code, out, _ = c.run("secrets", "rm", "--tenant", "acme", "github_token")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "secret github_token deleted")
	code, _, stderr = c.run("secrets", "rm", "--tenant", "acme", "github_token")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "no secret")

	t.Setenv("AGENTFLEET_TOKEN", k.APIKey)
	code, _, stderr = c.run("secrets", "rekey")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "admin token")
}

// serveOver serves another API over cfg's store and bus with box as its
// secrets key (the dispatcher restarted after a key rotation) and
// returns its URL.
func serveOver(t *testing.T, cfg api.Config, box *secrets.Box) string {
	t.Helper()
	cfg.Secrets, cfg.KeyRevocations = box, nil
	srv, err := api.New(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL
}
