-- Batches: many runs admitted at once, one per input, their results read
-- in input order (batch_index). A batch's runs are released (may start)
-- in input order, at most max_concurrent in flight; released is how many
-- have been. A batch being admitted has status 'admitting', and so have
-- its runs: it is admitted in chunks (one short write transaction each)
-- and seen by no reader until its last chunk commits. finished_at
-- (microseconds) is set once every run has ended.
ALTER TABLE batches ADD COLUMN status TEXT NOT NULL DEFAULT 'running';
ALTER TABLE batches ADD COLUMN max_concurrent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN released INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN max_turns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN max_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN callback_url TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN retry_of TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN finished_at INTEGER;
CREATE UNIQUE INDEX batches_idempotency ON batches (tenant, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX batches_tenant ON batches (tenant, id);
CREATE INDEX batches_unfinished ON batches (id) WHERE finished_at IS NULL;

ALTER TABLE runs ADD COLUMN batch_index INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN custom_id TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_batch_index ON runs (batch_id, batch_index) WHERE batch_id <> '';
-- A batch's runs not yet ended, for the count of those in flight. The
-- predicate must stay word for word what the queries say.
CREATE INDEX runs_open_batch ON runs (batch_id, batch_index) WHERE batch_id <> '' AND status NOT IN ('completed','failed','cancelled','max_turns');
