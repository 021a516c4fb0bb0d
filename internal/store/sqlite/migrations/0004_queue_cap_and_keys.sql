-- A tenant's cap on runs not yet finished (queued, running, waiting_*):
-- RunCreate refuses runs beyond it. Existing tenants get the default.
ALTER TABLE tenants ADD COLUMN max_queued_runs INTEGER NOT NULL DEFAULT 1000000 CHECK (max_queued_runs > 0);

-- API keys become several per tenant, each with a public id (what
-- GET/DELETE /v1/tenants/{id}/keys name it by; the hash stays the lookup
-- key and is never shown), a position for listing newest first (an
-- INTEGER PRIMARY KEY, which SQLite never renumbers), and the time of its
-- last use (written at most about once a minute per key). SQLite cannot
-- add such a key to a table, so the table is rebuilt. The key a tenant
-- was created with was named "initial"; it is the tenant's "default" key
-- now.
CREATE TABLE api_keys_v4 (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    hash         TEXT NOT NULL UNIQUE, -- hex SHA-256 of the key; the key is never stored
    tenant       TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER
);
INSERT INTO api_keys_v4 (id, hash, tenant, name, created_at)
    SELECT 'key_' || lower(hex(randomblob(16))), hash, tenant, CASE name WHEN 'initial' THEN 'default' ELSE name END, created_at
    FROM api_keys ORDER BY created_at, rowid;
DROP TABLE api_keys;
ALTER TABLE api_keys_v4 RENAME TO api_keys;
CREATE INDEX api_keys_tenant ON api_keys (tenant, seq);
