-- Retention (RunDeleteEnded) finds ended runs due for deletion through
-- this index instead of scanning runs: ended runs only, ordered by
-- creation (a run ends after it is created, so created_at bounds the
-- walk; updated_at, the end, is checked on the rows). The predicate must
-- stay word for word what store/internal/rules.EndedBeforeSQL says.
CREATE INDEX runs_ended ON runs (created_at) WHERE status IN ('completed','failed','cancelled','max_turns');
