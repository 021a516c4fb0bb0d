-- The console's pictures (store.StatsReader) read a week of a tenant's
-- usage and run ends, or a batch's run ends, as one range scan each:
--   * the usage ledger's tenant index also carries the tokens, so a
--     week of settlements is an index-only scan (it replaces
--     usage_ledger_tenant, which UsageList used the same way);
--   * ended runs by tenant or batch and end (a run ends at its last
--     update). Only ended runs enter them, so the turn commits of
--     running runs cost them nothing.
--
-- Migrations run in one transaction, so these are plain CREATE INDEX: on
-- large tables build them beforehand with CREATE INDEX CONCURRENTLY under
-- these names; the IF NOT EXISTS then skips them.
CREATE INDEX IF NOT EXISTS usage_ledger_tenant_tokens ON usage_ledger (tenant, created_at) INCLUDE (prompt_tokens, completion_tokens);
DROP INDEX IF EXISTS usage_ledger_tenant;
CREATE INDEX IF NOT EXISTS runs_tenant_ended ON runs (tenant, updated_at) INCLUDE (status) WHERE status IN ('completed','failed','cancelled','max_turns');
CREATE INDEX IF NOT EXISTS runs_batch_ended ON runs (batch_id, updated_at) INCLUDE (status) WHERE batch_id <> '' AND status IN ('completed','failed','cancelled','max_turns');
-- A batch's page reads its runs counted by status with their usage
-- (rules.BatchCountRunsSQL) once per read of the batch, its results and
-- its stats: an index-only scan of this index instead of a heap fetch
-- per run (100,000 of them for the largest batch).
CREATE INDEX IF NOT EXISTS runs_batch_counts ON runs (batch_id, status) INCLUDE (prompt_tokens, completion_tokens) WHERE batch_id <> '';
