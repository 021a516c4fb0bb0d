-- The side-effect journal (docs/ARCHITECTURE.md §4): each side-effecting
-- call of a turn's script (fetch and http other than GET and HEAD, ai,
-- aiJSON, spawn), with its outcome, recorded before the script sees it,
-- so that the turn executed again replays it instead of making it again.
-- result is the JSON the script got (NULL when it got error instead);
-- text, not jsonb, so a replay returns it byte for byte.
--
-- Like steps and model replies (0003), an entry is only inserted for a
-- run its statement found standing at the entry's turn, so there is no
-- foreign key to check; a trigger takes a deleted run's entries.
CREATE TABLE journal (
    run_id            text NOT NULL,
    turn              integer NOT NULL,
    idx               integer NOT NULL,
    primitive         text NOT NULL,
    method            text NOT NULL DEFAULT '',
    url               text NOT NULL DEFAULT '',
    result            text,
    error             text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    PRIMARY KEY (run_id, turn, idx)
);

CREATE FUNCTION runs_delete_journal() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
BEGIN
    DELETE FROM journal WHERE run_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_delete_journal AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION runs_delete_journal();
