-- Webhook triggers and their delivery logs. The triggers table of 0001
-- could hold no rows (nothing created them), so it is replaced.
DROP TABLE IF EXISTS triggers;

CREATE TABLE triggers (
    id                TEXT PRIMARY KEY,
    tenant            TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name              TEXT NOT NULL DEFAULT '',
    agent             TEXT NOT NULL,
    scheme            TEXT NOT NULL,
    message           TEXT NOT NULL DEFAULT '',
    session_id        TEXT NOT NULL DEFAULT '',
    events            TEXT,
    -- Sealed by the API (AES-GCM under AGENTFLEET_SECRETS_KEY).
    secret            TEXT NOT NULL,
    prev_secret       TEXT NOT NULL DEFAULT '',
    prev_secret_until INTEGER,
    max_turns         INTEGER NOT NULL DEFAULT 0,
    max_tokens        INTEGER NOT NULL DEFAULT 0,
    max_body_bytes    INTEGER NOT NULL DEFAULT 0,
    enabled           INTEGER NOT NULL DEFAULT 0,
    callback_url      TEXT NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX triggers_tenant ON triggers (tenant, id);

-- n counts a trigger's deliveries: a record drops the lines with
-- n <= its own minus the trigger's keep, and a listing walks (n, id)
-- backwards.
CREATE TABLE trigger_deliveries (
    id          TEXT PRIMARY KEY,
    trigger_id  TEXT NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    delivery    TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    event       TEXT NOT NULL DEFAULT '',
    action      TEXT NOT NULL DEFAULT '',
    outcome     TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    run_id      TEXT NOT NULL DEFAULT '',
    payload     BLOB
);
CREATE INDEX trigger_deliveries_log ON trigger_deliveries (trigger_id, n, id);

-- Run callbacks: a run created with a callback_url has a row here, made
-- just before the run (so no run can miss its callback); the dispatcher
-- claims the rows whose run has ended and POSTs the run's final view.
-- No foreign key to runs: the row comes first, and a row whose run was
-- never made (a repeated submission) or was deleted is pruned.
CREATE TABLE run_callbacks (
    run_id      TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    attempts    INTEGER NOT NULL DEFAULT 0,
    attempt_log TEXT,
    next_at     INTEGER NOT NULL,
    first_at    INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX run_callbacks_due ON run_callbacks (next_at) WHERE state = 'pending';

-- A tenant's callback secret, sealed like trigger secrets.
CREATE TABLE tenant_callback_secrets (
    tenant     TEXT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    secret     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
