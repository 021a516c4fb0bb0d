-- Agents have versions: a replacement is a new version, kept (with the
-- versions before it, and after the agent's delete) for the runs admitted
-- under it. An agent's spec is one JSON document (agentfleet.AgentSpec),
-- so a new field needs no migration. agents names each tenant's current
-- versions; agent_versions holds every version.
CREATE TABLE agent_versions (
    tenant     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL,
    version    integer NOT NULL,
    spec       jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name, version)
);
INSERT INTO agent_versions (tenant, name, version, spec, created_at)
SELECT tenant, name, 1, jsonb_strip_nulls(jsonb_build_object(
        'system', NULLIF(persona, ''), 'model', NULLIF(model, ''), 'primitives', primitives,
        'max_completion_tokens', NULLIF(max_completion_tokens, 0), 'max_turns', NULLIF(max_turns, 0),
        'max_model_calls_per_turn', NULLIF(max_model_calls_per_turn, 0))), updated_at
FROM agents;
ALTER TABLE agents
    ADD COLUMN version integer NOT NULL DEFAULT 1,
    DROP COLUMN persona, DROP COLUMN model, DROP COLUMN primitives, DROP COLUMN max_completion_tokens,
    DROP COLUMN max_turns, DROP COLUMN max_model_calls_per_turn, DROP COLUMN updated_at;
-- The version a run was admitted under; 0 (runs admitted before this
-- migration and since ended, or by an older dispatcher) uses the current.
ALTER TABLE runs ADD COLUMN agent_version integer NOT NULL DEFAULT 0;
UPDATE runs SET agent_version = 1 WHERE status NOT IN ('completed','failed','cancelled','max_turns');
