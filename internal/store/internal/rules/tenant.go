package rules

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// TenantCreate creates a tenant and its "default" agent (version 1 is
// p.DefaultAgent), so every tenant has one.
func (s *Store) TenantCreate(ctx context.Context, p store.TenantCreateParams) (agentfleet.Tenant, error) {
	p, w, err := TenantCreate(p)
	if err != nil {
		return agentfleet.Tenant{}, err
	}
	now := Now()
	var t agentfleet.Tenant
	err = s.d.Tx(ctx, func(x driver.Executor) error {
		var err error
		if t, err = x.TenantInsert(ctx, driver.TenantInsertParams{TenantCreateParams: p, WindowEvery: w.Every, Now: now}); err != nil {
			return err
		}
		_, err = x.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{
			Tenant: p.ID, Name: agentfleet.DefaultAgent, Spec: EncodeAgentSpec(p.DefaultAgent), Now: now,
		})
		return err
	})
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("create tenant %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TenantGetByID(ctx context.Context, id string) (agentfleet.Tenant, error) {
	t, err := s.d.TenantGet(ctx, id)
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("get tenant %s: %w", id, err)
	}
	return t, nil
}

func (s *Store) TenantList(ctx context.Context, p store.TenantListParams) (store.TenantListResult, error) {
	p, after, err := TenantList(p)
	if err != nil {
		return store.TenantListResult{}, err
	}
	var pos *driver.TenantPos
	if after != nil {
		pos = &driver.TenantPos{CreatedAt: time.UnixMicro(after.CreatedAt).UTC(), ID: after.ID}
	}
	ts, err := s.d.TenantList(ctx, p.Limit+1, pos)
	if err != nil {
		return store.TenantListResult{}, fmt.Errorf("list tenants: %w", err)
	}
	return TenantPage(ts, p), nil
}

func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyCreateParams) (store.APIKey, error) {
	scopes, err := APIKeyCreate(p)
	if err != nil {
		return store.APIKey{}, err
	}
	k, err := s.d.APIKeyInsert(ctx, driver.APIKeyInsertParams{
		ID: NewAPIKeyID(), Hash: HashAPIKey(p.Key), Tenant: p.Tenant, Name: p.Name, Scopes: scopes, Now: Now(),
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("create api key %q for tenant %s: %w", p.Name, p.Tenant, err)
	}
	return k, nil
}

func (s *Store) APIKeyList(ctx context.Context, p store.APIKeyListParams) (store.APIKeyListResult, error) {
	p, after, err := APIKeyList(p)
	if err != nil {
		return store.APIKeyListResult{}, err
	}
	rows, err := s.d.APIKeyList(ctx, p.Tenant, after, p.Limit+1)
	if err != nil {
		return store.APIKeyListResult{}, fmt.Errorf("list api keys of %s: %w", p.Tenant, err)
	}
	keys, seqs := make([]store.APIKey, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		keys[i], seqs[i] = r.Key, r.Seq
	}
	return APIKeyPage(keys, seqs, p), nil
}

func (s *Store) APIKeyDelete(ctx context.Context, p store.APIKeyDeleteParams) error {
	ok, err := s.d.APIKeyDelete(ctx, p.Tenant, p.ID)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("revoke api key %s of tenant %s: %w", p.ID, p.Tenant, err)
	}
	return nil
}

// TenantGetByAPIKey writes the key's last use only when it is due
// (APIKeyTouchDue), so lookups are not writes.
func (s *Store) TenantGetByAPIKey(ctx context.Context, p store.TenantGetByAPIKeyParams) (store.TenantGetByAPIKeyResult, error) {
	now := NowOr(p.Now)
	res, err := s.d.TenantGetByAPIKey(ctx, HashAPIKey(p.Key), now, now.Add(-APIKeyTouchEvery))
	if err != nil {
		return store.TenantGetByAPIKeyResult{}, fmt.Errorf("get tenant by api key: %w", err)
	}
	if APIKeyTouchDue(res.Key.LastUsedAt, now) {
		res.Key.LastUsedAt = now
	}
	return res, nil
}

// TenantCreate validates p and fills its defaults.
func TenantCreate(p store.TenantCreateParams) (store.TenantCreateParams, Window, error) {
	if err := CheckID("tenant id", p.ID); err != nil {
		return p, Window{}, err
	}
	if p.TokenLimit < 0 || p.TokensPerMinute < 0 {
		return p, Window{}, Invalidf("tenant %s: token limits must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxConcurrentRuns < 0 {
		return p, Window{}, Invalidf("tenant %s: max concurrent runs must not be negative (zero means unlimited)", p.ID)
	}
	if p.Weight < 0 {
		return p, Window{}, Invalidf("tenant %s: weight must not be negative (zero means 1)", p.ID)
	}
	if err := AgentUpsert(store.AgentUpsertParams{Tenant: p.ID, Name: agentfleet.DefaultAgent, Spec: p.DefaultAgent}); err != nil {
		return p, Window{}, err
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	var err error
	if p.MaxQueuedRuns, err = maxQueuedRuns(p.ID, p.MaxQueuedRuns); err != nil {
		return p, Window{}, err
	}
	w, err := ParseWindow(p.Window)
	if err != nil {
		return p, Window{}, err
	}
	p.Window = w.Name
	if p.Exhausted, err = exhausted(p.Exhausted); err != nil {
		return p, Window{}, err
	}
	return p, w, nil
}

// maxQueuedRuns checks a tenant's max_queued_runs and fills the default.
func maxQueuedRuns(tenant string, n int) (int, error) {
	switch {
	case n < 0:
		return 0, Invalidf("tenant %s: max queued runs must not be negative (zero means the default, %d)", tenant, store.MaxQueuedRunsDefault)
	case n == 0:
		return store.MaxQueuedRunsDefault, nil
	}
	return n, nil
}

func exhausted(e agentfleet.ExhaustedPolicy) (agentfleet.ExhaustedPolicy, error) {
	switch e {
	case "":
		return agentfleet.ExhaustedQueue, nil
	case agentfleet.ExhaustedQueue, agentfleet.ExhaustedFail:
		return e, nil
	}
	return "", Invalidf("exhausted policy %q: use %q or %q", e, agentfleet.ExhaustedQueue, agentfleet.ExhaustedFail)
}

// TenantUpdate validates the set fields of p. The returned window is
// non-nil when p changes it.
func TenantUpdate(p store.TenantUpdateParams) (store.TenantUpdateParams, *Window, error) {
	if p.ID == "" {
		return p, nil, Invalidf("tenant id is empty")
	}
	if (p.TokenLimit != nil && *p.TokenLimit < 0) || (p.TokensPerMinute != nil && *p.TokensPerMinute < 0) {
		return p, nil, Invalidf("tenant %s: token limits must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxConcurrentRuns != nil && *p.MaxConcurrentRuns < 0 {
		return p, nil, Invalidf("tenant %s: max concurrent runs must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxQueuedRuns != nil {
		n, err := maxQueuedRuns(p.ID, *p.MaxQueuedRuns)
		if err != nil {
			return p, nil, err
		}
		p.MaxQueuedRuns = &n
	}
	if p.Weight != nil {
		if *p.Weight < 0 {
			return p, nil, Invalidf("tenant %s: weight must not be negative (zero means 1)", p.ID)
		}
		if *p.Weight == 0 {
			one := 1
			p.Weight = &one
		}
	}
	if p.Exhausted != nil {
		e, err := exhausted(*p.Exhausted)
		if err != nil {
			return p, nil, err
		}
		p.Exhausted = &e
	}
	if p.Window == nil {
		return p, nil, nil
	}
	w, err := ParseWindow(*p.Window)
	if err != nil {
		return p, nil, err
	}
	p.Window = &w.Name
	return p, &w, nil
}

// apiKeyNameMax bounds a key's name.
const apiKeyNameMax = 100

// APIKeyCreate validates p; scopes is how its scopes are stored.
func APIKeyCreate(p store.APIKeyCreateParams) (scopes string, err error) {
	if p.Tenant == "" || p.Key == "" {
		return "", Invalidf("api key: tenant and key are required")
	}
	if len(p.Name) > apiKeyNameMax {
		return "", Invalidf("api key name is %d bytes: use at most %d", len(p.Name), apiKeyNameMax)
	}
	if err := CheckText("api key name", p.Name); err != nil {
		return "", err
	}
	return EncodeAPIKeyScopes(p.Scopes)
}

// EncodeAPIKeyScopes stores scopes as a comma-separated list in
// store.APIKeyScopes' order, each once; none is every scope.
func EncodeAPIKeyScopes(scopes []string) (string, error) {
	if len(scopes) == 0 {
		scopes = store.APIKeyScopes
	}
	for _, sc := range scopes {
		if !slices.Contains(store.APIKeyScopes, sc) {
			return "", Invalidf("api key scope %q is not one of %s", sc, strings.Join(store.APIKeyScopes, ", "))
		}
	}
	var out []string
	for _, sc := range store.APIKeyScopes {
		if slices.Contains(scopes, sc) {
			out = append(out, sc)
		}
	}
	return strings.Join(out, ","), nil
}

// DecodeAPIKeyScopes reverses EncodeAPIKeyScopes.
func DecodeAPIKeyScopes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// APIKeyList validates p and fills its defaults; it returns the position
// the cursor continues after (zero: from the newest).
func APIKeyList(p store.APIKeyListParams) (store.APIKeyListParams, int64, error) {
	if p.Tenant == "" {
		return p, 0, Invalidf("api key list: tenant is empty")
	}
	var err error
	if p.Limit, err = PageLimit("api key list", p.Limit); err != nil {
		return p, 0, err
	}
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, false)
	return p, after, err
}

// APIKeyPage is APIKeyList p's answer from rows read newest first, one
// more than p.Limit when a page follows; seqs are the rows' positions.
func APIKeyPage(keys []store.APIKey, seqs []int64, p store.APIKeyListParams) store.APIKeyListResult {
	var res store.APIKeyListResult
	if len(keys) > p.Limit {
		keys = keys[:p.Limit]
		res.NextCursor = EncodeCursor(false, seqs[p.Limit-1])
	}
	res.Keys = keys
	return res
}

// TenantList validates p and fills its defaults; it returns the position
// the cursor continues after (nil: from the newest).
func TenantList(p store.TenantListParams) (store.TenantListParams, *TenantPos, error) {
	var err error
	if p.Limit, err = PageLimit("tenant list", p.Limit); err != nil {
		return p, nil, err
	}
	if p.Cursor == "" {
		return p, nil, nil
	}
	pos, err := DecodeTenantCursor(p.Cursor)
	return p, &pos, err
}

// TenantPage is TenantList p's answer from rows read newest first, one
// more than p.Limit when a page follows.
func TenantPage(ts []agentfleet.Tenant, p store.TenantListParams) store.TenantListResult {
	var res store.TenantListResult
	if len(ts) > p.Limit {
		ts = ts[:p.Limit]
		res.NextCursor = EncodeTenantCursor(ts[len(ts)-1])
	}
	res.Tenants = ts
	return res
}
