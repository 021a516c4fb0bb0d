-- Webhook triggers and their delivery logs. The triggers table of 0001
-- could hold no rows (nothing created them), so it is replaced.
DROP TABLE IF EXISTS triggers;

CREATE TABLE triggers (
    id                text PRIMARY KEY,
    tenant            text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name              text NOT NULL DEFAULT '',
    agent             text NOT NULL,
    scheme            text NOT NULL,
    message           text NOT NULL DEFAULT '',
    session_id        text NOT NULL DEFAULT '',
    events            jsonb,
    -- Sealed by the API (AES-GCM under AGENTFLEET_SECRETS_KEY).
    secret            text NOT NULL,
    prev_secret       text NOT NULL DEFAULT '',
    prev_secret_until timestamptz,
    max_turns         integer NOT NULL DEFAULT 0,
    max_tokens        bigint NOT NULL DEFAULT 0,
    max_body_bytes    bigint NOT NULL DEFAULT 0,
    enabled           boolean NOT NULL DEFAULT false,
    callback_url      text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX triggers_tenant ON triggers (tenant, id COLLATE "C");

-- n counts a trigger's deliveries: a record drops the lines with
-- n <= its own minus the trigger's keep, a range of one or two index
-- entries, and a listing walks (n, id) backwards.
CREATE TABLE trigger_deliveries (
    id          text PRIMARY KEY,
    trigger_id  text NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    n           bigint NOT NULL,
    delivery    text NOT NULL,
    received_at timestamptz NOT NULL,
    event       text NOT NULL DEFAULT '',
    action      text NOT NULL DEFAULT '',
    outcome     text NOT NULL,
    reason      text NOT NULL DEFAULT '',
    run_id      text NOT NULL DEFAULT '',
    payload     bytea
);
CREATE INDEX trigger_deliveries_log ON trigger_deliveries (trigger_id, n, id COLLATE "C");

-- Run callbacks: a run created with a callback_url has a row here, made
-- just before the run (so no run can miss its callback); the dispatcher
-- claims the rows whose run has ended and POSTs the run's final view.
-- No foreign key to runs: the row comes first, and a row whose run was
-- never made (a repeated submission) or was deleted is pruned.
CREATE TABLE run_callbacks (
    run_id      text PRIMARY KEY,
    tenant      text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url         text NOT NULL,
    state       text NOT NULL DEFAULT 'pending',
    attempts    integer NOT NULL DEFAULT 0,
    attempt_log jsonb,
    next_at     timestamptz NOT NULL,
    first_at    timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX run_callbacks_due ON run_callbacks (next_at) WHERE state = 'pending';

-- A tenant's callback secret, sealed like trigger secrets.
CREATE TABLE tenant_callback_secrets (
    tenant     text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    secret     text NOT NULL,
    updated_at timestamptz NOT NULL
);
