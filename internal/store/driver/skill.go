package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// SkillExecutor stores tenants' skills and each tenant's skills
// revision, the counter a worker's index of them checks.
type SkillExecutor interface {
	// SkillUpsert inserts a tenant's skill, created and updated at now,
	// or replaces all of it but created_at. An unknown tenant is
	// store.ErrNotFound. p is stored as given.
	SkillUpsert(ctx context.Context, p store.SkillPutParams, now time.Time) (agentfleet.Skill, error)
	SkillGet(ctx context.Context, tenant, name string) (agentfleet.Skill, error)
	// SkillList reads a tenant's skills by name (bytewise).
	SkillList(ctx context.Context, tenant string) ([]agentfleet.Skill, error)
	// SkillDelete deletes a tenant's skill and reports whether there
	// was one.
	SkillDelete(ctx context.Context, tenant, name string) (bool, error)
	// SkillRevisionBump moves a tenant's skills revision one on (from 0
	// for its first) and returns it.
	SkillRevisionBump(ctx context.Context, tenant string) (int64, error)
	// SkillRevisionGet reads a tenant's skills revision: 0 when it has
	// none (or the tenant is unknown).
	SkillRevisionGet(ctx context.Context, tenant string) (int64, error)
}
