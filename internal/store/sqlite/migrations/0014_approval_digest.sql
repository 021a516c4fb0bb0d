-- An approval binds the exact call (docs/api.md, "Approvals"): digest is the hex
-- SHA-256 of its method, canonical URL, body and the headers the script
-- set (fetch, http), or of what it asks (ai, aiJSON, spawn). A turn run
-- again whose call at an index differs from the one decided there is
-- asked about again: one approval per (run, turn, call index, digest).
-- Approvals stored before this have digest '' and match no call, so a
-- run parked across the upgrade asks once more.
ALTER TABLE approvals ADD COLUMN digest TEXT NOT NULL DEFAULT '';
DROP INDEX approvals_call;
CREATE UNIQUE INDEX approvals_call ON approvals (run_id, turn, call_index, digest);
