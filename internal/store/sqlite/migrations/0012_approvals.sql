-- Approvals: a call of a run's turn that needs a person's yes. The
-- approvals table of 0001 could hold no rows (nothing created them), so
-- it is replaced. One approval per (run, turn, call index): the turn run
-- again meets the same call at the same index. An approval granted for
-- the session (scope 'session') lets the same call (primitive, method,
-- URL) through in every later run and turn of that session. notify_* is
-- the outbox of the agent's approval_callback_url. Times are
-- microseconds; seq orders lists.
DROP TABLE IF EXISTS approvals;

CREATE TABLE approvals (
    seq             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    tenant          TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    session_id      TEXT NOT NULL DEFAULT '',
    turn            INTEGER NOT NULL,
    call_index      INTEGER NOT NULL,
    primitive       TEXT NOT NULL,
    method          TEXT NOT NULL DEFAULT '',
    url             TEXT NOT NULL DEFAULT '',
    preview         TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    scope           TEXT NOT NULL DEFAULT 'call',
    decided_by      TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    decided_at      INTEGER,
    expires_at      INTEGER NOT NULL,
    notify_url      TEXT NOT NULL DEFAULT '',
    notify_state    TEXT NOT NULL DEFAULT '',
    notify_attempts INTEGER NOT NULL DEFAULT 0,
    notify_next_at  INTEGER,
    notify_error    TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX approvals_call ON approvals (run_id, turn, call_index);
CREATE INDEX approvals_tenant ON approvals (tenant, seq);
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_grants ON approvals (tenant, session_id, primitive, method, url) WHERE scope = 'session' AND status = 'approved';
CREATE INDEX approvals_notify ON approvals (notify_next_at) WHERE notify_state = 'pending';
