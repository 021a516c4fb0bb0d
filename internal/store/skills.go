package store

import "time"

// Skill is a named, reusable piece of script a tenant's agents can load.
type Skill struct {
	Tenant      string
	Name        string
	Description string
	Code        string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

type SkillUpsertParams struct {
	Tenant      string
	Name        string
	Description string
	Code        string
}
