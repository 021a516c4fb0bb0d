package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
)

// A run submission asks the store three things: the API key's tenant,
// whether the agent exists, and the insert. Only the insert has to be
// fresh, so the server keeps found keys and agents for a short while
// (Config.LookupCacheTTL). Keys are kept by the digest of the token, so
// the server's memory holds no usable key.
//
// A revoked key must not live on in that cache. The dispatcher that
// revokes it drops it at once and tells the others (Config.KeyRevocations,
// NATS in a fleet), who drop it when the message arrives. A revocation a
// dispatcher misses (it was disconnected from NATS) is bounded by the
// cache's TTL: it accepts the key for at most LookupCacheTTL more. A
// lookup that read the key just before its revocation cannot put it back
// either: the revocation leaves a tombstone for as long.
//
// A bearer token that is neither the admin token nor a key is remembered
// as unknown for Config.UnknownKeyTTL, so a client retrying a wrong or
// revoked key costs the store one lookup per TTL, not one per request. A
// key created through this server is forgotten as unknown at once; one
// created elsewhere was random and cannot have been tried here. Agents
// cannot be deleted yet, so a found agent stays true; an unknown agent is
// asked for every time, so one created a moment later is accepted at once.

// Defaults of the lookup caches.
const (
	LookupCacheTTLDefault = 5 * time.Second
	UnknownKeyTTLDefault  = 2 * time.Second
	// lookupCacheMax bounds each cache; at this size a cache holds a
	// few MiB at most.
	lookupCacheMax = 10_000
)

// KeyRevocations carries API key revocations between the dispatchers of
// a fleet: each publishes what it revokes and hears what the others do.
// *bus.Bus implements it.
type KeyRevocations interface {
	PublishKeyRevoked(ctx context.Context, keyID string) error
	// SubscribeKeyRevoked calls fn for every revocation published from
	// when it returns until unsubscribe.
	SubscribeKeyRevoked(fn func(keyID string)) (unsubscribe func(), err error)
}

// keyEntry is a found key: its tenant, and its id for revocation.
type keyEntry struct {
	tenant, keyID string
	// keyName is the key's name (its id when it has none): who acted,
	// in what a request records (an approval's decided_by). scopes are
	// what the key may do.
	keyName string
	scopes  []string
}

// agentKey names an agent of a tenant.
type agentKey struct {
	tenant, name string
}

// keyCache is what the server keeps of API keys (see above). The
// tombstones and the found keys change together under mu, so that a
// lookup racing a revocation either is dropped by it or sees its
// tombstone.
type keyCache struct {
	found   *ttlcache.Cache[[sha256.Size]byte, keyEntry]
	unknown *ttlcache.Cache[[sha256.Size]byte, struct{}]
	revoked *ttlcache.Cache[string, struct{}]
	mu      sync.Mutex // held by put and revoke
}

func newKeyCache(ttl, unknownTTL time.Duration) *keyCache {
	return &keyCache{
		found:   ttlcache.New[[sha256.Size]byte, keyEntry](ttl, lookupCacheMax),
		unknown: ttlcache.New[[sha256.Size]byte, struct{}](unknownTTL, lookupCacheMax),
		revoked: ttlcache.New[string, struct{}](ttl, lookupCacheMax),
	}
}

// put keeps a found key unless it was revoked since it was read; it
// reports whether the key still stands.
func (c *keyCache) put(digest [sha256.Size]byte, e keyEntry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.revoked.Get(e.keyID); gone {
		return false
	}
	c.found.Put(digest, e)
	return true
}

// revoke drops a key by id and leaves its tombstone.
func (c *keyCache) revoke(keyID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked.Put(keyID, struct{}{})
	c.found.DeleteFunc(func(_ [sha256.Size]byte, e keyEntry) bool { return e.keyID == keyID })
}

// keyByToken returns the API key token is (its tenant, id and name), or
// a 401 when there is none.
func (s *Server) keyByToken(ctx context.Context, token string) (keyEntry, error) {
	digest := sha256.Sum256([]byte(token))
	if e, ok := s.keys.found.Get(digest); ok {
		return e, nil
	}
	if _, ok := s.keys.unknown.Get(digest); ok {
		return keyEntry{}, errUnauthorized("invalid API key")
	}
	res, err := s.cfg.Store.TenantGetByAPIKey(ctx, store.TenantGetByAPIKeyParams{Key: token})
	if errors.Is(err, store.ErrNotFound) {
		s.keys.unknown.Put(digest, struct{}{})
		return keyEntry{}, errUnauthorized("invalid API key")
	}
	if err != nil {
		return keyEntry{}, fmt.Errorf("look up API key: %w", err)
	}
	e := keyEntry{tenant: res.Tenant.ID, keyID: res.Key.ID, keyName: cmp.Or(res.Key.Name, res.Key.ID), scopes: res.Key.Scopes}
	if !s.keys.put(digest, e) {
		return keyEntry{}, errUnauthorized("invalid API key: it was revoked")
	}
	return e, nil
}

// keyCreated forgets that a new key's token was ever unknown here.
func (s *Server) keyCreated(token string) { s.keys.unknown.Delete(sha256.Sum256([]byte(token))) }

// keyRevoked drops a revoked key from this server's cache.
func (s *Server) keyRevoked(keyID string) { s.keys.revoke(keyID) }

// checkAgent returns nil when tenant has an agent called name, and a 422
// naming the default agent when it has not.
func (s *Server) checkAgent(ctx context.Context, tenant, name string) error {
	k := agentKey{tenant: tenant, name: name}
	if _, ok := s.agents.Get(k); ok {
		return nil
	}
	if _, err := s.cfg.Store.AgentGetByName(ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errUnknownAgent(name)
		}
		return err
	}
	s.agents.Put(k, struct{}{})
	return nil
}
