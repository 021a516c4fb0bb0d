-- Skills (DESIGN.md section 20): a markdown body (was code), the agents
-- that see it (empty: all), how it came (imported, or compiled from
-- source_run). skill_revisions counts each tenant's skill writes, so a
-- worker's index of them knows when to rebuild. Names are bytewise, so
-- the primary key serves the listing by name.
ALTER TABLE skills RENAME COLUMN code TO body;
ALTER TABLE skills ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE skills ADD COLUMN agents jsonb NOT NULL DEFAULT '[]';
ALTER TABLE skills ADD COLUMN source text NOT NULL DEFAULT 'imported';
ALTER TABLE skills ADD COLUMN source_run text NOT NULL DEFAULT '';

CREATE TABLE skill_revisions (
    tenant   text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    revision bigint NOT NULL
);
