-- A tenant's cap on runs not yet finished (queued, running, waiting_*):
-- RunCreate refuses runs beyond it. Existing tenants get the default.
ALTER TABLE tenants ADD COLUMN max_queued_runs integer NOT NULL DEFAULT 1000000 CHECK (max_queued_runs > 0);

-- API keys become several per tenant, each with a public id (what
-- GET/DELETE /v1/tenants/{id}/keys name it by; the hash stays the lookup
-- key and is never shown), a position for listing newest first, and the
-- time of its last use (written at most about once a minute per key).
-- The key a tenant was created with was named "initial"; it is the
-- tenant's "default" key now.
ALTER TABLE api_keys ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE api_keys ADD COLUMN id text;
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
UPDATE api_keys SET id = 'key_' || replace(gen_random_uuid()::text, '-', ''),
    name = CASE name WHEN 'initial' THEN 'default' ELSE name END;
ALTER TABLE api_keys ALTER COLUMN id SET NOT NULL;
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);
DROP INDEX IF EXISTS api_keys_tenant;
CREATE INDEX api_keys_tenant ON api_keys (tenant, seq);
