package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/api/apitest"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// withBox gives the server box as its secrets key and logs to logs.
func withBox(box *secrets.Box, logs *lockedBuffer) func(*api.Config) {
	return func(c *api.Config) {
		c.Secrets = box
		if logs != nil {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
}

func newBox(t *testing.T, cur string, prev ...string) *secrets.Box {
	t.Helper()
	b, err := secrets.ParseKeys(cur, strings.Join(prev, ","))
	require.NoError(t, err)
	return b
}

// sealedSecret is the value the store keeps for a tenant's secret.
func (e *env) sealedSecret(tenant, name string) string {
	e.t.Helper()
	all, err := e.store.SecretSealedList(e.ctx, tenant)
	require.NoError(e.t, err)
	for _, s := range all {
		if s.Name == name {
			return s.Sealed
		}
	}
	e.t.Fatalf("tenant %s has no secret %s in the store", tenant, name)
	return ""
}

func TestSecretsNeedTheSecretsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	r := e.do("PUT", "/v1/secrets/gh", key, map[string]any{"value": "ghp_x1234", "hosts": []string{"api.github.com"}})
	requireError(t, r, http.StatusServiceUnavailable, "secrets_key_missing", "AGENTFLEET_SECRETS_KEY", "openssl rand -base64 32")
	requireError(t, e.do("POST", "/v1/secrets/rekey", adminToken, nil), http.StatusServiceUnavailable, "secrets_key_missing", "AGENTFLEET_SECRETS_KEY")
}

// TestSecretCRUD: a tenant's admin key creates (201), replaces (200,
// version + 1), lists, reads and deletes a secret; the value is sealed
// under the tenant and the name, and no answer or log line holds it.
func TestSecretCRUD(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	box := newBox(t, secrets.NewKey())
	e := newEnv(t, withBox(box, logs))
	key, other := e.tenant("acme"), e.tenant("other")
	const value, value2 = "ghp_0123456789abcdefTHEVALUE", "ghp_SECONDVALUEfedcba9876543210"

	r := e.do("PUT", "/v1/secrets/github_token", key, map[string]any{"value": value, "hosts": []string{"API.github.com", "uploads.github.com"}})
	require.NotContains(t, string(r.body), value)
	sec := decode[agentfleet.Secret](t, r, http.StatusCreated)
	require.Equal(t, "acme", sec.Tenant)
	require.Equal(t, "github_token", sec.Name)
	require.Equal(t, []string{"api.github.com", "uploads.github.com"}, sec.Hosts, "host names in lower case")
	require.Equal(t, agentfleet.SecretHeaderDefault, sec.Header)
	require.Equal(t, agentfleet.SecretFormatDefault, sec.Format)
	require.False(t, sec.Expose)
	require.Equal(t, 1, sec.Version)
	require.Equal(t, box.KeyID(), sec.KeyID)
	require.WithinDuration(t, time.Now(), sec.CreatedAt, time.Minute)

	sealed := e.sealedSecret("acme", "github_token")
	require.NotContains(t, sealed, value)
	got, err := box.Open(sealed, secrets.SecretAD("acme", "github_token"))
	require.NoError(t, err)
	require.Equal(t, value, got)
	_, err = box.Open(sealed, secrets.SecretAD("other", "github_token"))
	require.Error(t, err, "bound to its tenant")

	r = e.do("PUT", "/v1/secrets/github_token", key, map[string]any{"value": value2, "hosts": []string{"api.github.com"},
		"header": "X-Api-Key", "format": "{value}", "expose": true})
	require.NotContains(t, string(r.body), value2)
	up := decode[agentfleet.Secret](t, r, http.StatusOK)
	require.Equal(t, 2, up.Version)
	require.Equal(t, "X-Api-Key", up.Header)
	require.Equal(t, "{value}", up.Format)
	require.True(t, up.Expose)
	require.Equal(t, sec.CreatedAt.UTC(), up.CreatedAt.UTC(), "created is kept")
	got, err = box.Open(e.sealedSecret("acme", "github_token"), secrets.SecretAD("acme", "github_token"))
	require.NoError(t, err)
	require.Equal(t, value2, got)

	decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/signing_key", key, map[string]any{"value": "-----BEGIN KEY-----\nabc\n-----END KEY-----", "hosts": []string{"*.example.com"}, "expose": true}), http.StatusCreated)
	decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/a_first", key, map[string]any{"value": "v-first-1", "hosts": []string{"10.0.0.7"}}), http.StatusCreated)

	list := decode[wire.SecretList](t, e.do("GET", "/v1/secrets", key, nil), http.StatusOK)
	require.Equal(t, []string{"a_first", "github_token", "signing_key"}, secretNames(list.Secrets), "by name")
	require.Empty(t, list.NextCursor)
	require.Equal(t, []string{"*.example.com"}, list.Secrets[2].Hosts)
	page := decode[wire.SecretList](t, e.do("GET", "/v1/secrets?limit=2", key, nil), http.StatusOK)
	require.Equal(t, []string{"a_first", "github_token"}, secretNames(page.Secrets))
	rest := decode[wire.SecretList](t, e.do("GET", "/v1/secrets?limit=2&cursor="+page.NextCursor, key, nil), http.StatusOK)
	require.Equal(t, []string{"signing_key"}, secretNames(rest.Secrets))
	require.Empty(t, rest.NextCursor)
	requireError(t, e.do("GET", "/v1/secrets?cursor=Not-A-Name", key, nil), http.StatusBadRequest, "bad_request", "cursor")

	one := decode[agentfleet.Secret](t, e.do("GET", "/v1/secrets/github_token", key, nil), http.StatusOK)
	require.Equal(t, up.Version, one.Version)

	// Another tenant sees none of it, and cannot name it.
	require.Empty(t, decode[wire.SecretList](t, e.do("GET", "/v1/secrets", other, nil), http.StatusOK).Secrets)
	requireError(t, e.do("GET", "/v1/secrets/github_token", other, nil), http.StatusNotFound, "not_found")
	requireError(t, e.do("GET", "/v1/secrets?tenant=acme", other, nil), http.StatusNotFound, "not_found", `no tenant "acme"`)
	requireError(t, e.do("DELETE", "/v1/secrets/github_token", other, nil), http.StatusNotFound, "not_found")

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/secrets/github_token", key, nil).status)
	requireError(t, e.do("GET", "/v1/secrets/github_token", key, nil), http.StatusNotFound, "not_found", `no secret "github_token"`)
	requireError(t, e.do("DELETE", "/v1/secrets/github_token", key, nil), http.StatusNotFound, "not_found")
	again := decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/github_token", key, map[string]any{"value": value, "hosts": []string{"api.github.com"}}), http.StatusCreated)
	require.Equal(t, 1, again.Version, "made anew")

	require.NotContains(t, logs.String(), value)
	require.NotContains(t, logs.String(), value2)
}

// TestSecretsAdminToken: the admin token manages a tenant's secrets with
// ?tenant=; without it, or for a tenant that does not exist, it is told
// so. A key without the admin scope is refused.
func TestSecretsAdminToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBox(newBox(t, secrets.NewKey()), nil))
	key := e.tenant("acme")
	body := map[string]any{"value": "sk-abc-123", "hosts": []string{"api.openai.com"}}
	requireError(t, e.do("PUT", "/v1/secrets/openai", adminToken, body), http.StatusUnprocessableEntity, "unprocessable", "?tenant=")
	requireError(t, e.do("GET", "/v1/secrets", adminToken, nil), http.StatusUnprocessableEntity, "unprocessable", "?tenant=")
	requireError(t, e.do("PUT", "/v1/secrets/openai?tenant=ghost", adminToken, body), http.StatusNotFound, "not_found", `no tenant "ghost"`)
	sec := decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/openai?tenant=acme", adminToken, body), http.StatusCreated)
	require.Equal(t, "acme", sec.Tenant)
	require.Equal(t, []string{"openai"}, secretNames(decode[wire.SecretList](t, e.do("GET", "/v1/secrets", key, nil), http.StatusOK).Secrets))
	require.Equal(t, []string{"openai"}, secretNames(decode[wire.SecretList](t, e.do("GET", "/v1/secrets?tenant=acme", adminToken, nil), http.StatusOK).Secrets))
	decode[agentfleet.Secret](t, e.do("GET", "/v1/secrets/openai?tenant=acme", key, nil), http.StatusOK)
	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/secrets/openai?tenant=acme", adminToken, nil).status)

	for _, scope := range []string{"read", "submit"} {
		v := decode[wire.APIKeyView](t, e.do("POST", "/v1/tenants/acme/keys", key, map[string]any{"name": scope, "scopes": []string{scope}}), http.StatusCreated)
		requireError(t, e.do("GET", "/v1/secrets", v.APIKey, nil), http.StatusForbidden, "forbidden", `"admin" scope`)
		requireError(t, e.do("PUT", "/v1/secrets/x", v.APIKey, body), http.StatusForbidden, "forbidden", `"admin" scope`)
	}
	requireError(t, e.do("POST", "/v1/secrets/rekey", key, nil), http.StatusForbidden, "forbidden", "admin token")
	requireError(t, e.do("GET", "/v1/secrets", "", nil), http.StatusUnauthorized, "unauthorized")
}

// TestSecretValidation: what no worker could send is refused, naming the
// field and never the value.
func TestSecretValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBox(newBox(t, secrets.NewKey()), nil))
	key := e.tenant("acme")
	const v = "hunter2-THE-VALUE"
	hosts := []string{"api.github.com"}
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"Bad-Name", map[string]any{"value": v, "hosts": hosts}, "secret name"},
		{"ok", map[string]any{"hosts": hosts}, "value is required"},
		{"ok", map[string]any{"value": "", "hosts": hosts}, "value is required"},
		{"ok", map[string]any{"value": "short", "hosts": hosts}, "at least 8"},
		{"ok", map[string]any{"value": strings.Repeat("x", api.SecretValueMax+1), "hosts": hosts}, "the limit is 16384"},
		{"ok", map[string]any{"value": v}, "hosts is required"},
		{"ok", map[string]any{"value": v, "expose": true}, "hosts is required"},
		{"ok", map[string]any{"value": v, "hosts": []string{"https://api.github.com"}}, "not a bare host name"},
		{"ok", map[string]any{"value": v, "hosts": []string{"api.github.com:443"}}, "not a bare host name"},
		{"ok", map[string]any{"value": v, "hosts": []string{"*.com"}}, "too wide"},
		{"ok", map[string]any{"value": v, "hosts": hosts, "header": "Bad Header"}, "header"},
		{"ok", map[string]any{"value": v, "hosts": hosts, "header": "Host"}, "not one a secret may set"},
		{"ok", map[string]any{"value": v, "hosts": hosts, "format": "Bearer"}, "{value}"},
		{"ok", map[string]any{"value": v, "hosts": hosts, "format": "Bearer {value}\r\nX-Evil: 1"}, "control character"},
		{"ok", map[string]any{"value": v + "\r\nX-Evil: 1", "hosts": hosts}, "control character"},
	} {
		r := e.do("PUT", "/v1/secrets/"+c.name, key, c.body)
		msg := requireError(t, r, http.StatusUnprocessableEntity, "unprocessable", c.want)
		require.NotContains(t, msg, v)
	}
	for _, body := range []string{
		`{"value": "` + v + `", "hosts": ["api.github.com"], "extra": 1}`,
		`{"value": "` + v + "\x01" + `"}`,
		`{"value": ` + v + `}`,
		`{"value": 42}`,
	} {
		msg := requireError(t, e.do("PUT", "/v1/secrets/ok", key, body), http.StatusBadRequest, "bad_request")
		require.NotContains(t, msg, v)
		require.NotContains(t, msg, "hunter")
		require.NotContains(t, msg, "'h'", "not even the character the parser stopped at")
	}
	require.Empty(t, decode[wire.SecretList](t, e.do("GET", "/v1/secrets", key, nil), http.StatusOK).Secrets)
}

// TestSecretsRekey: after the key is rotated (the old one kept in
// AGENTFLEET_SECRETS_KEY_PREVIOUS), a rekey seals the tenants' secrets,
// the trigger secrets and the callback secrets again under the new key,
// so the old one can be dropped: a trigger still takes deliveries with
// the new key alone. A value no key opens is reported and kept.
func TestSecretsRekey(t *testing.T) {
	t.Parallel()
	oldKey, newKey := secrets.NewKey(), secrets.NewKey()
	e := newEnv(t, withBox(newBox(t, oldKey), nil))
	key := e.tenant("acme") // with a callback secret
	decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/one", key, map[string]any{"value": "v-one-111", "hosts": []string{"a.example.com"}}), http.StatusCreated)
	decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/two", key, map[string]any{"value": "v-two-222", "hosts": []string{"b.example.com"}, "expose": true}), http.StatusCreated)
	tv := e.createTrigger(key, map[string]any{"name": "gh", "scheme": "github"})
	rot := decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+tv.ID, key, map[string]any{"rotate_secret": true}), http.StatusOK)
	// One more, sealed under a key nobody holds any more.
	lost, err := newBox(t, secrets.NewKey()).Seal("v-lost", secrets.SecretAD("acme", "lost"))
	require.NoError(t, err)
	_, err = e.store.SecretPut(e.ctx, store.SecretPutParams{Tenant: "acme", Name: "lost", Sealed: lost, KeyID: secrets.KeyIDOf(lost), Hosts: []string{"x.example.com"}})
	require.NoError(t, err)

	// The dispatcher restarted with the new key, the old one previous.
	rotated := newBox(t, newKey, oldKey)
	e2 := e.serve(t, rotated)
	rep := decode[wire.RekeyReport](t, e2.do("POST", "/v1/secrets/rekey", adminToken, nil), http.StatusOK)
	// two secrets, the trigger's current and previous secret, the callback secret
	require.Equal(t, 5, rep.Rewritten, "%+v", rep)
	require.Zero(t, rep.Current)
	require.Equal(t, rotated.KeyID(), rep.KeyID)
	require.Equal(t, []wire.SealedRef{{Kind: "secret", Owner: "acme", Name: "lost"}}, rep.Unopened)
	rep = decode[wire.RekeyReport](t, e2.do("POST", "/v1/secrets/rekey", adminToken, nil), http.StatusOK)
	require.Zero(t, rep.Rewritten)
	require.Equal(t, 5, rep.Current)
	require.Len(t, rep.Unopened, 1)
	require.Equal(t, lost, e.sealedSecret("acme", "lost"), "left as it was")

	// The old key dropped: everything still opens.
	only := newBox(t, newKey)
	for name, want := range map[string]string{"one": "v-one-111", "two": "v-two-222"} {
		got, err := only.Open(e.sealedSecret("acme", name), secrets.SecretAD("acme", name))
		require.NoError(t, err)
		require.Equal(t, want, got)
		sec := decode[agentfleet.Secret](t, e2.do("GET", "/v1/secrets/"+name, key, nil), http.StatusOK)
		require.Equal(t, only.KeyID(), sec.KeyID)
	}
	cb, err := e.store.TenantCallbackSecretGet(e.ctx, "acme")
	require.NoError(t, err)
	_, err = only.Open(cb, maintain.CallbackSecretAD("acme"))
	require.NoError(t, err)
	e3 := e.serve(t, only)
	pr := []byte(`{"zen":"ok"}`)
	decode[wire.HookAnswer](t, e3.signed(rot, rot.Secret, "d-new", "ping", pr), http.StatusOK)
	decode[wire.HookAnswer](t, e3.signed(rot, tv.Secret, "d-old", "ping", pr), http.StatusOK)
}

// serve is a second API server, with box as its key, over the same store
// and bus: the dispatcher restarted with another configuration.
func (e *env) serve(t *testing.T, box *secrets.Box) *env {
	t.Helper()
	srv, err := api.New(api.Config{Store: e.store, Bus: e.bus, AdminToken: adminToken, Secrets: box, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	hs.Client().Transport = apitest.Transport(t, hs.Client().Transport)
	return &env{t: t, fixture: &fixture{ctx: e.ctx, store: e.store, bus: e.bus, srv: hs, api: srv, changed: make(chan string, 100)}}
}

func secretNames(ss []agentfleet.Secret) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// An agent may name only secrets its tenant has; once the secret is set,
// the same agent is taken.
func TestAgentNamesOnlySecretsItsTenantHas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBox(newBox(t, secrets.NewKey()), nil))
	key := e.tenant("acme")
	spec := map[string]any{"secrets": []string{"github_token"}}
	requireError(t, e.do("PUT", "/v1/agents/reviewer", key, spec), http.StatusUnprocessableEntity, "unprocessable",
		`secrets: tenant acme has no secret "github_token"`, "PUT /v1/secrets/github_token")
	decode[agentfleet.Secret](t, e.do("PUT", "/v1/secrets/github_token", key, map[string]any{"value": "ghp_the-value-1234", "hosts": []string{"api.github.com"}}), http.StatusCreated)
	a := decode[agentfleet.Agent](t, e.do("PUT", "/v1/agents/reviewer", key, spec), http.StatusCreated)
	require.Equal(t, []string{"github_token"}, a.Secrets)
	other := e.tenant("globex")
	requireError(t, e.do("PUT", "/v1/agents/reviewer", other, spec), http.StatusUnprocessableEntity, "unprocessable", "tenant globex has no secret")
}
