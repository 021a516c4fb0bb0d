-- A run's steps, events and model replies are only ever inserted for a
-- run the same statement found: a turn commit inserts its steps and events
-- joined to the UPDATE of the run that fences it, every other event insert
-- follows the run's UPDATE (or SELECT ... FOR UPDATE) in its transaction,
-- a run creation inserts its first step with the run, and a reply record
-- selects the run standing at the reply's turn. So the foreign keys
-- checked nothing, and their checks were the most expensive part of a turn
-- commit: one query per inserted row, finding and key-share-locking again
-- the run the statement had just updated (about 6 events and 2 steps a
-- turn; a commit batch spent more time in them than in the rest of its
-- statement).
--
-- What the keys still did was cascade a run's deletion (the store never
-- deletes runs; an operator deleting a tenant does). The trigger below
-- does that once per statement, for all the deleted runs at once.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_run_id_fkey;
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_run_id_fkey;
ALTER TABLE model_replies DROP CONSTRAINT IF EXISTS model_replies_run_id_fkey;

-- The function names its tables through the search_path it was created
-- with (this schema's), not the deleting session's.
CREATE OR REPLACE FUNCTION runs_delete_children() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM steps WHERE run_id IN (SELECT id FROM gone);
    DELETE FROM events WHERE run_id IN (SELECT id FROM gone);
    DELETE FROM model_replies WHERE run_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_delete_children AFTER DELETE ON runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION runs_delete_children();
