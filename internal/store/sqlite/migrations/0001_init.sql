-- The store of record, SQLite edition. Timestamps are INTEGER microseconds
-- since the Unix epoch, UTC (exact, compact, and they sort); raw JSON
-- payloads are BLOBs kept byte for byte; metadata and primitives are JSON
-- text. The shape mirrors the Postgres schema so both backends answer the
-- contract suite alike.

CREATE TABLE tenants (
    id                  TEXT PRIMARY KEY,
    token_limit         INTEGER NOT NULL DEFAULT 0 CHECK (token_limit >= 0),
    budget_window       TEXT NOT NULL,
    tokens_per_minute   INTEGER NOT NULL DEFAULT 0 CHECK (tokens_per_minute >= 0),
    max_concurrent_runs INTEGER NOT NULL DEFAULT 0,
    weight              INTEGER NOT NULL DEFAULT 1,
    exhausted           TEXT NOT NULL DEFAULT 'queue',
    used                INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    reserved            INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    window_start        INTEGER,
    window_end          INTEGER,
    minute_start        INTEGER,
    minute_used         INTEGER NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);

CREATE TABLE api_keys (
    hash       TEXT PRIMARY KEY, -- hex SHA-256 of the key; the key is never stored
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

CREATE TABLE agents (
    tenant                TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                  TEXT NOT NULL,
    persona               TEXT NOT NULL DEFAULT '',
    model                 TEXT NOT NULL DEFAULT '',
    primitives            TEXT, -- NULL: the sandbox's default set
    max_completion_tokens INTEGER NOT NULL DEFAULT 0,
    max_turns             INTEGER NOT NULL DEFAULT 0,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE runs (
    -- seq orders runs by creation (the single writer admits them one at a
    -- time) and is what list cursors carry.
    seq                INTEGER PRIMARY KEY,
    id                 TEXT NOT NULL UNIQUE,
    tenant             TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent              TEXT NOT NULL,
    session_id         TEXT NOT NULL DEFAULT '',
    status             TEXT NOT NULL,
    message            TEXT NOT NULL DEFAULT '',
    context            BLOB,
    metadata           TEXT,
    idempotency_key    TEXT NOT NULL DEFAULT '',
    batch_id           TEXT NOT NULL DEFAULT '',
    max_turns          INTEGER NOT NULL DEFAULT 0,
    max_tokens         INTEGER NOT NULL DEFAULT 0,
    deadline           INTEGER,
    turn               INTEGER NOT NULL DEFAULT 0,
    args               BLOB,
    answer             BLOB,
    error              TEXT NOT NULL DEFAULT '',
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,
    completion_tokens  INTEGER NOT NULL DEFAULT 0,
    data_bytes_carried INTEGER NOT NULL DEFAULT 0,
    event_seq          INTEGER NOT NULL DEFAULT 0,
    cancel_requested   INTEGER NOT NULL DEFAULT 0,
    cancel_reason      TEXT NOT NULL DEFAULT '',
    wake               INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_tenant ON runs (tenant, seq);
CREATE INDEX runs_tenant_status ON runs (tenant, status, seq);
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_session ON runs (tenant, session_id, seq) WHERE session_id <> '';
CREATE INDEX runs_batch ON runs (batch_id, seq) WHERE batch_id <> '';

CREATE TABLE steps (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn              INTEGER NOT NULL,
    idx               INTEGER NOT NULL,
    kind              TEXT NOT NULL,
    content           TEXT NOT NULL,
    model             TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    PRIMARY KEY (run_id, turn, idx)
) WITHOUT ROWID;

CREATE TABLE events (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq               INTEGER NOT NULL,
    v                 INTEGER NOT NULL,
    turn              INTEGER NOT NULL,
    type              TEXT NOT NULL,
    ts                INTEGER NOT NULL,
    content           TEXT NOT NULL DEFAULT '',
    args              BLOB,
    tokens_prompt     INTEGER,
    tokens_completion INTEGER,
    summary           TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE model_replies (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn              INTEGER NOT NULL,
    content           TEXT NOT NULL,
    model             TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    usage_reported    INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    PRIMARY KEY (run_id, turn)
) WITHOUT ROWID;

CREATE TABLE reservations (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id      TEXT NOT NULL DEFAULT '',
    tokens      INTEGER NOT NULL CHECK (tokens > 0),
    lease_until INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX reservations_lease ON reservations (lease_until);
CREATE INDEX reservations_tenant ON reservations (tenant);

CREATE TABLE usage_ledger (
    id                INTEGER PRIMARY KEY,
    tenant            TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id            TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    charged           INTEGER NOT NULL,
    overage           INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
);
CREATE INDEX usage_ledger_tenant ON usage_ledger (tenant, created_at);
CREATE INDEX usage_ledger_run ON usage_ledger (run_id);

CREATE TABLE approvals (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn       INTEGER NOT NULL,
    primitive  TEXT NOT NULL,
    args       BLOB,
    status     TEXT NOT NULL,
    decided_by TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    decided_at INTEGER
);
CREATE INDEX approvals_run ON approvals (run_id);

CREATE TABLE batches (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent      TEXT NOT NULL,
    total      INTEGER NOT NULL,
    metadata   TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE triggers (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent      TEXT NOT NULL,
    kind       TEXT NOT NULL,
    secret     TEXT NOT NULL DEFAULT '',
    template   TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE INDEX triggers_tenant ON triggers (tenant, created_at);

CREATE TABLE skills (
    tenant      TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    code        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
