-- The side-effect journal (docs/ARCHITECTURE.md §4): each side-effecting
-- call of a turn's script (fetch and http other than GET and HEAD, ai,
-- aiJSON, spawn), with its outcome, recorded before the script sees it,
-- so that the turn executed again replays it instead of making it again.
-- result is the JSON the script got (NULL when it got error instead);
-- created_at is in microseconds.
CREATE TABLE journal (
    run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn              INTEGER NOT NULL,
    idx               INTEGER NOT NULL,
    primitive         TEXT NOT NULL,
    method            TEXT NOT NULL DEFAULT '',
    url               TEXT NOT NULL DEFAULT '',
    result            TEXT,
    error             TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    PRIMARY KEY (run_id, turn, idx)
) WITHOUT ROWID;
