-- Retention (RunDeleteEnded) finds ended runs due for deletion through
-- this index instead of scanning runs: ended runs only, ordered by
-- creation (a run ends after it is created, so created_at bounds the
-- walk; updated_at, the end, is checked on the rows). It holds no column
-- a turn commit changes (status is indexed already, created_at never
-- changes), so running runs' updates stay HOT. The predicate must stay
-- word for word what store/internal/rules.EndedBeforeSQL says.
--
-- Migrations run in one transaction, so this is a plain CREATE INDEX: it
-- blocks writes to runs while it builds. On a large runs table, build it
-- beforehand with CREATE INDEX CONCURRENTLY under this name; the IF NOT
-- EXISTS then skips it.
CREATE INDEX IF NOT EXISTS runs_ended ON runs (created_at) WHERE status IN ('completed','failed','cancelled','max_turns');

-- The trigger of 0003 now runs for every retention batch, not only for
-- an operator's rare delete. Its statements are planned once per
-- connection, and planned while steps, events and model_replies are
-- small (or never analyzed) they scan them, and keep scanning them as
-- they grow. Planned without scans, they find a deleted run's rows by
-- key at any size.
ALTER FUNCTION runs_delete_children() SET enable_seqscan = off;
