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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// A nats-server configured as the README says, its configuration file
// including the generated server.conf by a path relative to itself,
// starts in JWT mode: the fleet's creds connect and reach JetStream, a
// connection without creds is refused. An absolute include path does
// not work (nats-server joins it to the including file's directory),
// which is why the README's line is relative.
func TestNATSAuthServerConfIncluded(t *testing.T) {
	etc := t.TempDir() // the README's /etc/nats
	c := cli{}
	code, out, stderr := c.run("nats-auth", "--resolver-dir", filepath.Join(etc, "jwt"), filepath.Join(etc, "nats-auth"))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, `include "nats-auth/server.conf"`)

	// The README's line, as it stands.
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	line := regexp.MustCompile(`nats\.conf:\s+(include "[^"]+")`).FindSubmatch(readme)
	require.NotNil(t, line, "the README's include line")
	require.Equal(t, `include "nats-auth/server.conf"`, string(line[1]))

	conf := filepath.Join(etc, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(string(line[1])+"\nlisten: \"127.0.0.1:-1\"\n"+
		"jetstream { store_dir: \""+filepath.ToSlash(filepath.Join(etc, "data"))+"\" }\n"), 0o644))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	require.NotEmpty(t, opts.TrustedOperators, "the include brought the operator")
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))

	nc, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(filepath.Join(etc, "nats-auth", natsauth.FileFleetCreds)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	require.NoError(t, err, "the fleet's account has JetStream")
	_, err = nats.Connect(srv.ClientURL(), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "no creds")

	abs := filepath.Join(etc, "abs.conf")
	require.NoError(t, os.WriteFile(abs, []byte("include \""+filepath.ToSlash(filepath.Join(etc, "nats-auth", "server.conf"))+"\"\n"), 0o644))
	_, err = server.ProcessConfigFile(abs)
	require.Error(t, err, "an absolute include path is joined to the including file's directory")
}

// --if-missing keeps a whole set, writes one where there is none, and
// refuses half of one.
func TestNATSAuthIfMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats-auth")
	c := cli{}
	code, _, stderr := c.run("nats-auth", "--if-missing", dir)
	require.Equal(t, exitOK, code, stderr)
	before, err := os.ReadFile(filepath.Join(dir, natsauth.FileSigningKey))
	require.NoError(t, err)
	code, out, stderr := c.run("nats-auth", "--if-missing", dir)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "kept")
	after, _ := os.ReadFile(filepath.Join(dir, natsauth.FileSigningKey))
	require.Equal(t, before, after, "an existing set is kept")

	require.NoError(t, os.Remove(filepath.Join(dir, natsauth.FileFleetCreds)))
	code, _, stderr = c.run("nats-auth", "--if-missing", dir)
	require.NotEqual(t, exitOK, code)
	require.Contains(t, stderr, natsauth.FileFleetCreds)
	code, _, _ = c.run("nats-auth", "--if-missing", "--force", dir)
	require.Equal(t, exitUsage, code)
}
