-- Tenants' named secrets (DESIGN.md section 16): the value sealed by the
-- API (secrets.Box, bound to secrets.SecretAD), never in clear. key_id
-- names the key it is sealed under, so a rekey finds the others.
-- version counts the secret's writes; a rekey is not one.
-- Both key columns are bytewise, so the primary key serves the listings
-- by name and the rekey's walk in (tenant, name) order.
CREATE TABLE secrets (
    tenant     text COLLATE "C" NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text COLLATE "C" NOT NULL,
    sealed     text NOT NULL,
    key_id     text NOT NULL,
    hosts      jsonb NOT NULL,
    header     text NOT NULL,
    format     text NOT NULL,
    expose     boolean NOT NULL DEFAULT false,
    version    integer NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
