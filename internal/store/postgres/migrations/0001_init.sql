-- The store of record. Timestamps are timestamptz (microseconds, UTC in
-- and out); raw JSON payloads (context, carried args, answers, event args)
-- are bytea so they come back byte for byte as they went in; small
-- structured values (metadata, primitives) are jsonb.

CREATE TABLE tenants (
    id                  text PRIMARY KEY,
    token_limit         bigint NOT NULL DEFAULT 0 CHECK (token_limit >= 0),
    budget_window       text NOT NULL,
    -- The length of a duration window in microseconds; 0 for calendar
    -- windows ("day", "month"), whose bounds are passed in by the caller.
    window_us           bigint NOT NULL DEFAULT 0,
    tokens_per_minute   bigint NOT NULL DEFAULT 0 CHECK (tokens_per_minute >= 0),
    max_concurrent_runs integer NOT NULL DEFAULT 0,
    weight              integer NOT NULL DEFAULT 1,
    exhausted           text NOT NULL DEFAULT 'queue',
    -- The budget ledger: used and reserved in the current window.
    used                bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    reserved            bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    window_start        timestamptz,
    window_end          timestamptz,
    minute_start        timestamptz,
    minute_used         bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);

CREATE TABLE api_keys (
    hash       text PRIMARY KEY, -- hex SHA-256 of the key; the key is never stored
    tenant     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

CREATE TABLE agents (
    tenant                text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name                  text NOT NULL,
    persona               text NOT NULL DEFAULT '',
    model                 text NOT NULL DEFAULT '',
    primitives            jsonb, -- NULL: the sandbox's default set
    max_completion_tokens integer NOT NULL DEFAULT 0,
    max_turns             integer NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE runs (
    -- seq orders runs by creation (within a session it is the order the
    -- session lock admitted them in) and is what list cursors carry.
    seq                bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                 text PRIMARY KEY,
    tenant             text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent              text NOT NULL,
    session_id         text NOT NULL DEFAULT '',
    status             text NOT NULL,
    message            text NOT NULL DEFAULT '',
    context            bytea,
    metadata           jsonb,
    idempotency_key    text NOT NULL DEFAULT '',
    batch_id           text NOT NULL DEFAULT '',
    max_turns          integer NOT NULL DEFAULT 0,
    max_tokens         bigint NOT NULL DEFAULT 0,
    deadline           timestamptz,
    turn               integer NOT NULL DEFAULT 0,
    args               bytea,
    answer             bytea,
    error              text NOT NULL DEFAULT '',
    prompt_tokens      bigint NOT NULL DEFAULT 0,
    completion_tokens  bigint NOT NULL DEFAULT 0,
    data_bytes_carried bigint NOT NULL DEFAULT 0,
    event_seq          bigint NOT NULL DEFAULT 0,
    cancel_requested   boolean NOT NULL DEFAULT false,
    -- Why a cancel was requested while a turn ran; becomes the run's error
    -- when the worker finishes the cancellation without one.
    cancel_reason      text NOT NULL DEFAULT '',
    wake               integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_tenant ON runs (tenant, seq);
CREATE INDEX runs_tenant_status ON runs (tenant, status, seq);
CREATE INDEX runs_status ON runs (status, seq);
CREATE INDEX runs_session ON runs (tenant, session_id, seq) WHERE session_id <> '';
CREATE INDEX runs_batch ON runs (batch_id, seq) WHERE batch_id <> '';

-- The trace. Rows are only ever appended by a statement fenced on the
-- run's row, so (run_id, turn, idx) is unique by construction.
CREATE TABLE steps (
    run_id            text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn              integer NOT NULL,
    idx               integer NOT NULL,
    kind              text NOT NULL,
    content           text NOT NULL,
    model             text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    PRIMARY KEY (run_id, turn, idx)
);

-- The outbox of RunEvents: seq is dense per run, assigned from
-- runs.event_seq under the run's row lock.
CREATE TABLE events (
    run_id            text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq               bigint NOT NULL,
    v                 smallint NOT NULL,
    turn              integer NOT NULL,
    type              text NOT NULL,
    ts                timestamptz NOT NULL,
    content           text NOT NULL DEFAULT '',
    args              bytea,
    tokens_prompt     bigint, -- NULL: the event carries no tokens
    tokens_completion bigint,
    summary           text NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE model_replies (
    run_id            text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn              integer NOT NULL,
    content           text NOT NULL,
    model             text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    usage_reported    boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL,
    PRIMARY KEY (run_id, turn)
);

-- Outstanding holds on a tenant's tokens; their sum is tenants.reserved.
CREATE TABLE reservations (
    id          text PRIMARY KEY,
    tenant      text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id      text NOT NULL DEFAULT '',
    tokens      bigint NOT NULL CHECK (tokens > 0),
    lease_until timestamptz NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX reservations_lease ON reservations (lease_until);

-- Settled usage: what each model call reported and what it was charged.
CREATE TABLE usage_ledger (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant            text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id            text NOT NULL DEFAULT '',
    model             text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    charged           bigint NOT NULL,
    overage           bigint NOT NULL,
    created_at        timestamptz NOT NULL
);
CREATE INDEX usage_ledger_tenant ON usage_ledger (tenant, created_at);
CREATE INDEX usage_ledger_run ON usage_ledger (run_id);

CREATE TABLE approvals (
    id         text PRIMARY KEY,
    tenant     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id     text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn       integer NOT NULL,
    primitive  text NOT NULL,
    args       bytea,
    status     text NOT NULL,
    decided_by text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    decided_at timestamptz
);
CREATE INDEX approvals_run ON approvals (run_id);

CREATE TABLE batches (
    id         text PRIMARY KEY,
    tenant     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent      text NOT NULL,
    total      integer NOT NULL,
    metadata   jsonb,
    created_at timestamptz NOT NULL
);

CREATE TABLE triggers (
    id         text PRIMARY KEY,
    tenant     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent      text NOT NULL,
    kind       text NOT NULL,
    secret     text NOT NULL DEFAULT '',
    template   text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL
);
CREATE INDEX triggers_tenant ON triggers (tenant, created_at);

CREATE TABLE skills (
    tenant      text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    code        text NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
