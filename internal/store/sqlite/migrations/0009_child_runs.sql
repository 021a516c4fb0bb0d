-- Child runs: a run a script spawned names its parent and its depth; a
-- parent counts its children, and while it waits for some of them
-- (waiting_children) holds their ids (a JSON array) and the wait's
-- deadline (microseconds), until its next turn commits.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN children INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN wait_ids TEXT;
ALTER TABLE runs ADD COLUMN wait_until INTEGER;
CREATE INDEX runs_parent ON runs (parent_run_id, seq) WHERE parent_run_id <> '';
-- The children not yet ended, for the dispatcher's sweep of those whose
-- parent ended (RunChildrenDue): it stays as small as the children
-- running now, whatever the history. The predicate must stay word for
-- word what the sweep's query says.
CREATE INDEX runs_open_children ON runs (parent_run_id) WHERE parent_run_id <> '' AND status NOT IN ('completed','failed','cancelled','max_turns');
