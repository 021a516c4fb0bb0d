package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentfleet/agentfleet/internal/store"
)

// API key scopes (docs/api.md, "API keys"). Every route needs one scope of a tenant's
// key, found from its pattern: admin manages the tenant (keys, callback
// secret, secrets, agents, triggers), submit starts and stops work (runs,
// sessions, batches, approvals), read reads. The admin token needs none.

// scopeRule gives the scope of the routes under prefix: write for those
// that change something, read for GET.
type scopeRule struct {
	prefix      string
	write, read string
}

// scopeRules are tried in order; the first prefix that matches wins.
var scopeRules = []scopeRule{
	{"/v1/tenants/{id}/keys", store.ScopeAdmin, store.ScopeAdmin},
	{"/v1/tenants/{id}/callback-secret", store.ScopeAdmin, store.ScopeAdmin},
	{"/v1/tenants/{id}/secrets", store.ScopeAdmin, store.ScopeAdmin},
	{"/v1/tenants/{id}/nats-creds", store.ScopeAdmin, store.ScopeAdmin}, // and the admin token's alone
	{"/v1/secrets", store.ScopeAdmin, store.ScopeAdmin},
	{"/v1/skills", store.ScopeAdmin, store.ScopeAdmin},
	{"/v1/runs/{id}/skill", store.ScopeAdmin, store.ScopeAdmin}, // it writes a skill
	{"/v1/triggers", store.ScopeAdmin, store.ScopeAdmin},        // their deliveries hold payloads
	{"/v1/agents", store.ScopeAdmin, store.ScopeRead},
	{"/v1/runs", store.ScopeSubmit, store.ScopeRead},
	{"/v1/sessions", store.ScopeSubmit, store.ScopeRead}, // a delete deletes runs
	{"/v1/batches", store.ScopeSubmit, store.ScopeRead},
	{"/v1/approvals", store.ScopeSubmit, store.ScopeRead},
}

// scopeFor is the scope a request to the route pattern ("METHOD /path")
// needs: by scopeRules, else read for GET and admin for anything else,
// so a route added without a rule is closed, not open.
func scopeFor(pattern string) string {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	get := method == http.MethodGet || method == http.MethodHead
	for _, r := range scopeRules {
		if path == r.prefix || strings.HasPrefix(path, r.prefix+"/") {
			if get {
				return r.read
			}
			return r.write
		}
	}
	if get {
		return store.ScopeRead
	}
	return store.ScopeAdmin
}

// checkScope refuses a tenant key without the scope the request's route
// needs: 403 naming it.
func checkScope(r *http.Request, p principal) error {
	if p.admin {
		return nil
	}
	need := scopeFor(r.Pattern)
	if slices.Contains(p.scopes, need) {
		return nil
	}
	return &apiError{status: http.StatusForbidden, code: "forbidden", msg: fmt.Sprintf(
		"this API key has the scopes %s; %s %s needs the %q scope: use a key with it (agentctl tenants keys create --scopes %s)",
		scopeList(p.scopes), r.Method, r.URL.Path, need, need)}
}

func scopeList(scopes []string) string {
	if len(scopes) == 0 {
		return "(none)"
	}
	return strings.Join(scopes, ",")
}
