-- Child runs: a run a script spawned names its parent and its depth; a
-- parent counts its children, and while it waits for some of them
-- (waiting_children) holds their ids and the wait's deadline, until its
-- next turn commits.
ALTER TABLE runs
    ADD COLUMN parent_run_id text NOT NULL DEFAULT '',
    ADD COLUMN depth integer NOT NULL DEFAULT 0,
    ADD COLUMN children integer NOT NULL DEFAULT 0,
    ADD COLUMN wait_ids jsonb,
    ADD COLUMN wait_until timestamptz;
CREATE INDEX runs_parent ON runs (parent_run_id, seq) WHERE parent_run_id <> '';
-- The children not yet ended, for the dispatcher's sweep of those whose
-- parent ended (RunChildrenDue): it stays as small as the children
-- running now, whatever the history. The predicate must stay word for
-- word what the sweep's query says.
CREATE INDEX runs_open_children ON runs (parent_run_id) WHERE parent_run_id <> '' AND status NOT IN ('completed','failed','cancelled','max_turns');
