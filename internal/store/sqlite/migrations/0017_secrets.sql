-- Tenants' named secrets (DESIGN.md section 16): the value sealed by the
-- API (secrets.Box, bound to secrets.SecretAD), never in clear. key_id
-- names the key it is sealed under, so a rekey finds the others.
-- version counts the secret's writes; a rekey is not one.
CREATE TABLE secrets (
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    sealed     TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    hosts      TEXT NOT NULL, -- a JSON array of host names
    header     TEXT NOT NULL,
    format     TEXT NOT NULL,
    expose     INTEGER NOT NULL DEFAULT 0,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
