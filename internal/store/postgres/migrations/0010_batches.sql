-- Batches: many runs admitted at once, one per input, their results read
-- in input order (batch_index). A batch's runs are released (may start)
-- in input order, at most max_concurrent in flight; released is how many
-- have been. A batch being admitted has status 'admitting' and is seen by
-- no reader. finished_at is set once every run has ended.
ALTER TABLE batches
    ADD COLUMN status text NOT NULL DEFAULT 'running',
    ADD COLUMN max_concurrent integer NOT NULL DEFAULT 0,
    ADD COLUMN released integer NOT NULL DEFAULT 0,
    ADD COLUMN max_turns integer NOT NULL DEFAULT 0,
    ADD COLUMN max_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN idempotency_key text NOT NULL DEFAULT '',
    ADD COLUMN callback_url text NOT NULL DEFAULT '',
    ADD COLUMN retry_of text NOT NULL DEFAULT '',
    ADD COLUMN finished_at timestamptz;
CREATE UNIQUE INDEX batches_idempotency ON batches (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX batches_tenant ON batches (tenant, id);
CREATE INDEX batches_unfinished ON batches (id) WHERE finished_at IS NULL;

ALTER TABLE runs
    ADD COLUMN batch_index integer NOT NULL DEFAULT 0,
    ADD COLUMN custom_id text NOT NULL DEFAULT '';
CREATE INDEX runs_batch_index ON runs (batch_id, batch_index) WHERE batch_id <> '';
-- A batch's runs not yet ended, for the count of those in flight: it
-- stays as small as the batch's unfinished runs. The predicate must stay
-- word for word what the queries say.
CREATE INDEX runs_open_batch ON runs (batch_id, batch_index) WHERE batch_id <> '' AND status NOT IN ('completed','failed','cancelled','max_turns');
