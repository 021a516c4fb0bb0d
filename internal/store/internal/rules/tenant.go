package rules

import (
	"context"
	"fmt"
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

func (s *Store) SkillUpsert(ctx context.Context, p store.SkillUpsertParams) (store.Skill, error) {
	if err := SkillUpsert(p); err != nil {
		return store.Skill{}, err
	}
	k, err := s.d.SkillUpsert(ctx, p, Now())
	if err != nil {
		return store.Skill{}, fmt.Errorf("upsert skill %s/%s: %w", p.Tenant, p.Name, err)
	}
	return k, nil
}

func (s *Store) SkillGetByName(ctx context.Context, tenant, name string) (store.Skill, error) {
	k, err := s.d.SkillGet(ctx, tenant, name)
	if err != nil {
		return store.Skill{}, fmt.Errorf("get skill %s/%s: %w", tenant, name, err)
	}
	return k, nil
}

func (s *Store) SkillList(ctx context.Context, tenant string) ([]store.Skill, error) {
	ks, err := s.d.SkillList(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list skills of %s: %w", tenant, err)
	}
	return ks, nil
}
