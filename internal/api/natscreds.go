package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// NATSCreds issues and revokes the NATS credentials of tenants' own
// subscribers (docs/operations.md, "NATS auth"); the fleet implements it over natsauth and
// the servers' account resolver.
type NATSCreds interface {
	// TenantCreds returns a .creds file for tenant, valid for ttl (zero:
	// the default).
	TenantCreds(ctx context.Context, tenant string, ttl time.Duration) ([]byte, error)
	// RevokeTenantCreds revokes every creds issued to tenant so far,
	// removes the consumers made with them, and returns the instant they
	// are revoked up to.
	RevokeTenantCreds(ctx context.Context, tenant string) (time.Time, error)
}

// NATSCredsTTLMax bounds ?ttl=.
const NATSCredsTTLMax = 366 * 24 * time.Hour

func (s *Server) natsCredsTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.cfg.NATSCreds == nil {
		s.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: "nats_auth_missing",
			msg: "this dispatcher issues NATS credentials only with AGENTFLEET_NATS_SIGNING_KEY set (see agentctl nats-auth)"})
		return "", false
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Store.TenantGetByID(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errNotFound("no tenant %q", id)
		}
		s.fail(w, r, err)
		return "", false
	}
	return id, true
}

func (s *Server) handleNATSCredsGet(w http.ResponseWriter, r *http.Request, _ principal) {
	var ttl time.Duration
	if v := r.URL.Query().Get("ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > NATSCredsTTLMax {
			s.fail(w, r, errBadRequest("ttl=%q: want a duration from 1s to %s, like 24h or 30m", v, NATSCredsTTLMax))
			return
		}
		ttl = d
	}
	id, ok := s.natsCredsTenant(w, r)
	if !ok {
		return
	}
	creds, err := s.cfg.NATSCreds.TenantCreds(r.Context(), id, ttl)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.creds"`)
	_, _ = w.Write(creds)
}

func (s *Server) handleNATSCredsRevoke(w http.ResponseWriter, r *http.Request, _ principal) {
	id, ok := s.natsCredsTenant(w, r)
	if !ok {
		return
	}
	at, err := s.cfg.NATSCreds.RevokeTenantCreds(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.NATSCredsRevocation{Tenant: id, RevokedBefore: at.UTC()})
}
