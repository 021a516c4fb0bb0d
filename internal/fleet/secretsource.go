package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
)

// secretSourceTTL is how long a worker keeps a tenant's opened secrets:
// a replaced value reaches the turns of a busy tenant within it. A turn
// whose agent names a secret the kept list lacks reads again at once, so
// a secret set just before a run is there for it.
const secretSourceTTL = 5 * time.Second

// secretSource is the worker's port to a tenant's secrets: it reads the
// sealed values from the store, opens them with the fleet's key, and
// keeps them for secretSourceTTL. The tenant's trigger and callback
// secrets come along, only to be redacted like the rest: with no hosts,
// under names no secret can have ("trigger-secret", "callback-secret"),
// so that no agent can name one.
type secretSource struct {
	st    store.Store
	box   *secrets.Box
	cache *ttlcache.Cache[string, []agentfleet.OpenSecret]
}

func newSecretSource(st store.Store, box *secrets.Box) *secretSource {
	return &secretSource{st: st, box: box, cache: ttlcache.New[string, []agentfleet.OpenSecret](secretSourceTTL, 10_000)}
}

// TenantSecrets returns tenant's opened secrets, read again when one of
// want is not among those kept.
func (s *secretSource) TenantSecrets(ctx context.Context, tenant string, want []string) ([]agentfleet.OpenSecret, error) {
	if kept, ok := s.cache.Get(tenant); ok && hasAll(kept, want) {
		return kept, nil
	}
	open, err := s.read(ctx, tenant)
	if err != nil {
		return nil, err
	}
	s.cache.Put(tenant, open)
	return open, nil
}

func hasAll(open []agentfleet.OpenSecret, names []string) bool {
	for _, n := range names {
		if !slices.ContainsFunc(open, func(o agentfleet.OpenSecret) bool { return o.Name == n }) {
			return false
		}
	}
	return true
}

func (s *secretSource) read(ctx context.Context, tenant string) ([]agentfleet.OpenSecret, error) {
	sealed, err := s.st.SecretSealedList(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("read the secrets of tenant %s: %w", tenant, err)
	}
	if len(sealed) > 0 && s.box == nil {
		return nil, fmt.Errorf("tenant %s has secrets and this worker has no %s to open them: set it, the same as the dispatchers'", tenant, secrets.EnvKey)
	}
	open := make([]agentfleet.OpenSecret, 0, len(sealed)+1)
	for _, sv := range sealed {
		v, err := s.box.Open(sv.Sealed, secrets.SecretAD(tenant, sv.Name))
		if err != nil {
			return nil, fmt.Errorf("open secret %s of tenant %s: %w", sv.Name, tenant, err)
		}
		open = append(open, agentfleet.OpenSecret{Secret: sv.Secret, Value: v})
	}
	if s.box == nil {
		return open, nil
	}
	// The tenant's callback and trigger secrets are only redacted: a
	// value that does not open is skipped, not a failed turn.
	if cb, err := s.st.TenantCallbackSecretGet(ctx, tenant); err == nil {
		if v, err := s.box.Open(cb, maintain.CallbackSecretAD(tenant)); err == nil {
			open = append(open, agentfleet.OpenSecret{Secret: agentfleet.Secret{Tenant: tenant, Name: "callback-secret"}, Value: v})
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the callback secret of tenant %s: %w", tenant, err)
	}
	for cursor := ""; ; {
		page, err := s.st.TriggerList(ctx, store.TriggerListParams{Tenant: tenant, Limit: 200, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("read the triggers of tenant %s: %w", tenant, err)
		}
		for _, t := range page.Triggers {
			for _, sealed := range []string{t.Secret, t.PrevSecret} {
				if sealed == "" {
					continue
				}
				if v, err := s.box.Open(sealed, t.ID); err == nil {
					open = append(open, agentfleet.OpenSecret{Secret: agentfleet.Secret{Tenant: tenant, Name: "trigger-secret"}, Value: v})
				}
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			return open, nil
		}
	}
}
