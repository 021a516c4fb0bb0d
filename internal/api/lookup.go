package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// A run submission asks the store three things: the API key's
// tenant, whether the agent exists, and the insert. Only the insert has
// to be fresh. The store can neither revoke a key nor delete an agent, so
// a positive answer to either lookup stays true, and the server keeps it
// for a short while (Config.LookupCacheTTL). Negative answers are never
// kept: a key or agent created a moment after a rejection works at once,
// and an unknown one is rejected every time.

// Defaults of the lookup caches.
const (
	LookupCacheTTLDefault = 5 * time.Second
	// lookupCacheMax bounds each cache; at this size a cache holds a
	// few MiB at most.
	lookupCacheMax = 10_000
)

// agentKey names an agent of a tenant.
type agentKey struct {
	tenant, name string
}

// tenantByAPIKey returns the id of the tenant whose API key token is, or
// a 401 when there is none.
func (s *Server) tenantByAPIKey(ctx context.Context, token string) (string, error) {
	// The map is keyed by the key's digest, so the server's memory
	// holds no usable key.
	digest := sha256.Sum256([]byte(token))
	if id, ok := s.keys.Get(digest); ok {
		return id, nil
	}
	res, err := s.cfg.Store.TenantGetByAPIKey(ctx, store.TenantGetByAPIKeyParams{Key: token})
	if errors.Is(err, store.ErrNotFound) {
		return "", errUnauthorized("invalid API key")
	}
	if err != nil {
		return "", fmt.Errorf("look up API key: %w", err)
	}
	s.keys.Put(digest, res.Tenant.ID)
	return res.Tenant.ID, nil
}

// checkAgent returns nil when tenant has an agent called name, and a 422
// naming the default agent when it has not.
func (s *Server) checkAgent(ctx context.Context, tenant, name string) error {
	k := agentKey{tenant: tenant, name: name}
	if _, ok := s.agents.Get(k); ok {
		return nil
	}
	if _, err := s.cfg.Store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errUnprocessable("unknown agent %q (every tenant has %q)", name, agentfleet.DefaultAgent)
		}
		return err
	}
	s.agents.Put(k, struct{}{})
	return nil
}
