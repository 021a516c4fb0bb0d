-- Approvals: a call of a run's turn that needs a person's yes. The
-- approvals table of 0001 could hold no rows (nothing created them), so
-- it is replaced. One approval per (run, turn, call index): the turn run
-- again meets the same call at the same index. An approval granted for
-- the session (scope 'session') lets the same call (primitive, method,
-- URL) through in every later run and turn of that session. notify_* is
-- the outbox of the agent's approval_callback_url.
DROP TABLE IF EXISTS approvals;

CREATE TABLE approvals (
    id              text PRIMARY KEY,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    tenant          text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    run_id          text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    session_id      text NOT NULL DEFAULT '',
    turn            integer NOT NULL,
    call_index      integer NOT NULL,
    primitive       text NOT NULL,
    method          text NOT NULL DEFAULT '',
    url             text NOT NULL DEFAULT '',
    preview         text NOT NULL DEFAULT '',
    status          text NOT NULL,
    reason          text NOT NULL DEFAULT '',
    scope           text NOT NULL DEFAULT 'call',
    decided_by      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    decided_at      timestamptz,
    expires_at      timestamptz NOT NULL,
    notify_url      text NOT NULL DEFAULT '',
    notify_state    text NOT NULL DEFAULT '',
    notify_attempts integer NOT NULL DEFAULT 0,
    notify_next_at  timestamptz,
    notify_error    text NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX approvals_call ON approvals (run_id, turn, call_index);
CREATE INDEX approvals_tenant ON approvals (tenant, seq);
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_grants ON approvals (tenant, session_id, primitive, method, url) WHERE scope = 'session' AND status = 'approved';
CREATE INDEX approvals_notify ON approvals (notify_next_at) WHERE notify_state = 'pending';
