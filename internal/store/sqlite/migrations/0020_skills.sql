-- Skills (DESIGN.md section 20): a markdown body (was code), the agents
-- that see it (a JSON array; empty: all), how it came (imported, or
-- compiled from source_run). skill_revisions counts each tenant's skill
-- writes, so a worker's index of them knows when to rebuild.
ALTER TABLE skills RENAME COLUMN code TO body;
ALTER TABLE skills ADD COLUMN agents TEXT NOT NULL DEFAULT '[]';
ALTER TABLE skills ADD COLUMN source TEXT NOT NULL DEFAULT 'imported';
ALTER TABLE skills ADD COLUMN source_run TEXT NOT NULL DEFAULT '';

CREATE TABLE skill_revisions (
    tenant   TEXT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
