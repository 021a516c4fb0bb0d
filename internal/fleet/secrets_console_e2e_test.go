package fleet_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/wire"
)

// TestConsoleSecrets: the secrets page lists a tenant's secrets (name,
// hosts, header, version) and never a value, for the tenant's key and,
// once it names the tenant, for the admin token.
func TestConsoleSecrets(t *testing.T) {
	br := browsertest.Start(t)
	f := setupFleetWith(t, fleetOptions{})
	url := f.dispatcher.URL()
	const value = "ghp_CONSOLEMUSTNOTSHOWTHIS"
	_, err := f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: value, Hosts: []string{"api.github.com", "uploads.github.com"}})
	require.NoError(t, err)
	_, err = f.tenant.PutSecret(f.ctx, "", "github_token", wire.SecretRequest{Value: value + "2", Hosts: []string{"api.github.com", "uploads.github.com"}})
	require.NoError(t, err)
	_, err = f.admin.PutSecret(f.ctx, "acme", "stripe", wire.SecretRequest{Value: "sk_live_x", Hosts: []string{"api.stripe.com"}, Header: "X-Api-Key", Format: "{value}"})
	require.NoError(t, err)
	row := func(name string) string { return fmt.Sprintf(`tr[data-key=%q]`, name) }

	p := signIn(t, br, url, f.tenantKey)
	p.Click(`#nav a[href="#/secrets"]`)
	p.WaitVisible(row("github_token"))
	p.WaitVisible(row("stripe"))
	gh := p.Text(row("github_token"))
	require.Contains(t, gh, "api.github.com, uploads.github.com")
	require.Contains(t, gh, "Authorization: Bearer {value}")
	require.Contains(t, p.Text(row("stripe")), "X-Api-Key: {value}")
	require.Equal(t, "2", p.Text(row("github_token")+" td:nth-child(5)"), "version 2")
	p.Screenshot(t.ArtifactDir(), "secrets")
	require.NotContains(t, p.Text("body"), value)
	require.NotContains(t, p.Text("body"), "sk_live_x")
	requireClean(t, p)

	admin := signIn(t, br, url, "admin-secret")
	admin.Click(`#nav a[href="#/secrets"]`)
	admin.WaitVisible("#secrets-tenant")
	admin.Type("#secrets-tenant", "acme")
	admin.Click(".tenant-pick button[type=submit]")
	admin.WaitVisible(row("stripe"))
	admin.WaitText(".page.secrets h1", "Secrets of acme")
	require.NotContains(t, admin.Text("body"), "sk_live_x")
	requireClean(t, admin)
}
