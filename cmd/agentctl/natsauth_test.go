package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/natsauth"
)

// issuerCreds serves GET .../nats-creds from a real issuer; revocation
// needs NATS servers in JWT mode, which internal/fleet's tests run.
type issuerCreds struct{ iss *natsauth.Issuer }

func (c issuerCreds) TenantCreds(_ context.Context, tenant string, ttl time.Duration) ([]byte, error) {
	return c.iss.TenantCreds(tenant, ttl)
}

func (issuerCreds) RevokeTenantCreds(context.Context, string) (time.Time, error) {
	return time.Time{}, errors.New("revocation is tested in internal/fleet")
}

func TestNATSAuthCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats-auth")
	c := cli{}
	code, out, stderr := c.run("nats-auth", dir)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "AGENTFLEET_NATS_CREDS="+filepath.Join(dir, natsauth.FileFleetCreds))
	for _, f := range []string{natsauth.FileServerConf, natsauth.FileFleetCreds, natsauth.FileSigningKey, natsauth.FileSysCreds, natsauth.FileOperatorNK} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	before, err := os.ReadFile(filepath.Join(dir, natsauth.FileSigningKey))
	require.NoError(t, err)
	code, _, stderr = c.run("nats-auth", dir)
	require.Equal(t, exitUsage, code, "refuses to overwrite")
	require.Contains(t, stderr, "--force")
	after, _ := os.ReadFile(filepath.Join(dir, natsauth.FileSigningKey))
	require.Equal(t, before, after, "nothing replaced")
	code, _, stderr = c.run("nats-auth", "--force", dir)
	require.Equal(t, exitOK, code, stderr)

	// The dispatcher's side: creds of a tenant through the CLI.
	iss, err := natsauth.LoadIssuer(filepath.Join(dir, natsauth.FileSigningKey), natsauth.Subjects{})
	require.NoError(t, err)
	newCLI(t, func(cfg *api.Config) { cfg.NATSCreds = issuerCreds{iss} })
	code, _, stderr = c.run("tenants", "create", "acme")
	require.Equal(t, exitOK, code, stderr)

	file := filepath.Join(t.TempDir(), "acme.creds")
	code, _, stderr = c.run("tenants", "nats-creds", "--ttl", "2h", "-o", file, "acme")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "nats sub --creds "+file+" 'af.events.acme.>'")
	creds, err := os.ReadFile(file)
	require.NoError(t, err)
	m := regexp.MustCompile(`subscribe to af\.events\.acme\.> .* Expires (\S+)\.`).FindSubmatch(creds)
	require.NotNil(t, m, "%s", creds)
	expires, err := time.Parse(time.RFC3339, string(m[1]))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), expires, 5*time.Second)

	code, out, _ = c.run("tenants", "nats-creds", "acme")
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(out, "-----BEGIN NATS USER JWT-----"), out)

	code, _, stderr = c.run("tenants", "nats-creds", "nobody")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, stderr, "nobody")
	code, _, _ = c.run("tenants", "nats-creds", "--revoke", "-o", file, "acme")
	require.Equal(t, exitUsage, code)
	code, _, _ = c.run("tenants", "nats-creds")
	require.Equal(t, exitUsage, code)
}
