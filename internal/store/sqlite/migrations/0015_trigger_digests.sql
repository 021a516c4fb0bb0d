-- A GitHub delivery's id is not signed, so a captured body could be
-- replayed under new ids: the first delivery of a body claims its
-- SHA-256 here for the dedupe window, and a replay finds that delivery
-- (and, by its idempotency key, its run).
CREATE TABLE trigger_digests (
    trigger_id TEXT NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    digest     BLOB NOT NULL,
    delivery   TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    PRIMARY KEY (trigger_id, digest)
) WITHOUT ROWID;
CREATE INDEX trigger_digests_age ON trigger_digests (trigger_id, claimed_at);
