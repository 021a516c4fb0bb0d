-- A session's latest checkpoint (GET /v1/sessions/{id}) is its newest
-- summary step: found per run through this index instead of reading
-- every step of the session. Steps are only inserted, and only summary
-- steps enter it, so the turn commit's other steps cost it nothing.
CREATE INDEX IF NOT EXISTS steps_summary ON steps (run_id, turn, idx) WHERE kind = 'summary';
