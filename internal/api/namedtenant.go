package api

import (
	"errors"
	"net/http"

	"github.com/agentfleet/agentfleet/internal/store"
)

// namedTenant is the tenant whose things (what: "secrets", "sessions")
// the request reads or manages: a key's own (a ?tenant= must name it), or
// for the admin token ?tenant=, which must exist. A tenant the caller may
// not see is a 404.
func (s *Server) namedTenant(r *http.Request, p principal, what string) (string, error) {
	q := r.URL.Query().Get("tenant")
	if !p.admin {
		if q != "" && q != p.tenant {
			return "", errNotFound("no tenant %q", q)
		}
		return p.tenant, nil
	}
	if q == "" {
		return "", errUnprocessable("%s belong to a tenant: with the admin token, name it with ?tenant=ID (or use the tenant's API key)", what)
	}
	if _, err := s.cfg.Store.TenantGetByID(r.Context(), q); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errNotFound("no tenant %q", q)
		}
		return "", err
	}
	return q, nil
}

// withNamedTenant resolves the tenant (namedTenant) before h, which gets
// it as p.tenant.
func (s *Server) withNamedTenant(what string, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		tenant, err := s.namedTenant(r, p, what)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		p.tenant = tenant
		h(w, r, p)
	}
}
