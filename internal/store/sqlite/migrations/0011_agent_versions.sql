-- Agents have versions: a replacement is a new version, kept (with the
-- versions before it, and after the agent's delete) for the runs admitted
-- under it. An agent's spec is one JSON document (agentfleet.AgentSpec),
-- so a new field needs no migration. agents names each tenant's current
-- versions; agent_versions holds every version.
CREATE TABLE agent_versions (
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    spec       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, version)
) WITHOUT ROWID;
-- json_patch drops the keys whose value is null: absent means default.
INSERT INTO agent_versions (tenant, name, version, spec, created_at)
SELECT tenant, name, 1, json_patch('{}', json_object(
        'system', NULLIF(persona, ''), 'model', NULLIF(model, ''), 'primitives', json(primitives),
        'max_completion_tokens', NULLIF(max_completion_tokens, 0), 'max_turns', NULLIF(max_turns, 0),
        'max_model_calls_per_turn', NULLIF(max_model_calls_per_turn, 0))), updated_at
FROM agents;
ALTER TABLE agents ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE agents DROP COLUMN persona;
ALTER TABLE agents DROP COLUMN model;
ALTER TABLE agents DROP COLUMN primitives;
ALTER TABLE agents DROP COLUMN max_completion_tokens;
ALTER TABLE agents DROP COLUMN max_turns;
ALTER TABLE agents DROP COLUMN max_model_calls_per_turn;
ALTER TABLE agents DROP COLUMN updated_at;
-- The version a run was admitted under; 0 (runs admitted before this
-- migration and since ended, or by an older dispatcher) uses the current.
ALTER TABLE runs ADD COLUMN agent_version INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET agent_version = 1 WHERE status NOT IN ('completed','failed','cancelled','max_turns');
