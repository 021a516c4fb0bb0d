package natsauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/natsauth"
)

func setup(t *testing.T) (*natsauth.Setup, *natsauth.Issuer) {
	t.Helper()
	s, err := natsauth.Generate(natsauth.GenerateConfig{})
	require.NoError(t, err)
	iss, err := natsauth.ParseIssuer(s.SigningKey, natsauth.Subjects{})
	require.NoError(t, err)
	return s, iss
}

// accountJWT is the fleet account's JWT as server.conf preloads it.
func accountJWT(t *testing.T, s *natsauth.Setup) string {
	t.Helper()
	for _, l := range strings.Split(string(s.ServerConf), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && k == s.Account {
			return v
		}
	}
	t.Fatal("no preload of the fleet account in server.conf")
	return ""
}

func TestGenerateWritesAConsistentSet(t *testing.T) {
	s, iss := setup(t)
	require.Equal(t, s.Account, iss.Account())
	conf := string(s.ServerConf)
	for _, want := range []string{"operator: ey", "system_account: A", "type: full", `dir: "jwt"`, "resolver_preload"} {
		require.Contains(t, conf, want)
	}
	ac, err := jwt.DecodeAccountClaims(accountJWT(t, s))
	require.NoError(t, err)
	require.Equal(t, natsauth.AccountNameDefault, ac.Name)
	require.Equal(t, int64(-1), ac.Limits.JetStreamLimits.DiskStorage, "JetStream enabled for the fleet")

	fleetJWT, err := jwt.ParseDecoratedJWT(s.FleetCreds)
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(fleetJWT)
	require.NoError(t, err)
	require.Equal(t, s.Account, uc.IssuerAccount)
	require.True(t, uc.Permissions.Pub.Empty() && uc.Permissions.Sub.Empty(), "the fleet's user may do everything")
	require.Zero(t, uc.Expires)

	dir := t.TempDir()
	require.NoError(t, s.WriteDir(dir, false))
	err = s.WriteDir(dir, false)
	require.True(t, errors.Is(err, natsauth.ErrExists), "%v", err)
	require.NoError(t, s.WriteDir(dir, true))
	fi, err := os.Stat(filepath.Join(dir, natsauth.FileSigningKey))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	_, err = natsauth.LoadIssuer(filepath.Join(dir, natsauth.FileSigningKey), natsauth.Subjects{})
	require.NoError(t, err)
	_, err = natsauth.LoadIssuer(filepath.Join(dir, natsauth.FileFleetCreds), natsauth.Subjects{})
	require.ErrorContains(t, err, "ACCOUNT SIGNING KEY", "a creds file is not the issuer bundle")
}

func TestTenantCredsAreScopedToTheTenant(t *testing.T) {
	_, iss := setup(t)
	creds, err := iss.TenantCreds("acme", 0)
	require.NoError(t, err)
	userJWT, err := jwt.ParseDecoratedJWT(creds)
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(userJWT)
	require.NoError(t, err)

	user, err := iss.TenantUser("acme")
	require.NoError(t, err)
	require.Equal(t, user, uc.Subject, "every creds of a tenant shares one user key")
	again, _ := iss.TenantCreds("acme", time.Hour)
	againJWT, _ := jwt.ParseDecoratedJWT(again)
	uc2, _ := jwt.DecodeUserClaims(againJWT)
	require.Equal(t, user, uc2.Subject)
	other, _ := iss.TenantUser("globex")
	require.NotEqual(t, user, other)

	require.InDelta(t, time.Now().Add(natsauth.TTLDefault).Unix(), uc.Expires, 5)
	require.ElementsMatch(t, []string{"af.events.acme.>", "af.stream.acme.>", "af.batches.acme.>", "_INBOX_acme.>"}, []string(uc.Permissions.Sub.Allow))
	require.ElementsMatch(t, []string{
		"af.js.acme.>",
	}, []string(uc.Permissions.Pub.Allow))

	for _, bad := range []struct {
		tenant string
		ttl    time.Duration
	}{{"", 0}, {"a.b", 0}, {"a*", 0}, {"a>", 0}, {"a b", 0}, {"acme", time.Millisecond}, {"acme", natsauth.TTLMax + time.Hour}} {
		_, err := iss.TenantCreds(bad.tenant, bad.ttl)
		require.Error(t, err, "%q %s", bad.tenant, bad.ttl)
	}
}

// A revocation keeps every revocation any answering node held, on top of
// the newest JWT.
func TestRevokeTenantMergesWhatTheServersHold(t *testing.T) {
	s, iss := setup(t)
	base := accountJWT(t, s)
	t1 := time.Unix(time.Now().Unix(), 0)
	withGlobex, err := iss.RevokeTenant([]string{base}, "globex", t1)
	require.NoError(t, err)

	// A lagging node still answers with base: the globex revocation
	// must survive acme's.
	t2 := t1.Add(time.Second)
	next, err := iss.RevokeTenant([]string{base, withGlobex}, "acme", t2)
	require.NoError(t, err)
	for tenant, want := range map[string]time.Time{"acme": t2, "globex": t1, "initech": {}} {
		got, err := iss.RevokedAt([]string{next}, tenant)
		require.NoError(t, err)
		require.True(t, want.Equal(got), "%s: %s, want %s", tenant, got, want)
	}
	ac, err := jwt.DecodeAccountClaims(next)
	require.NoError(t, err)
	require.Equal(t, natsauth.AccountNameDefault, ac.Name, "the rest of the account is kept")
	require.Len(t, ac.SigningKeys, 1)

	_, err = iss.RevokeTenant(nil, "acme", t2)
	require.Error(t, err, "nothing to revoke on")
	other, _ := natsauth.Generate(natsauth.GenerateConfig{})
	_, err = iss.RevokeTenant([]string{accountJWT(t, other)}, "acme", t2)
	require.ErrorContains(t, err, "not the fleet account")
}
