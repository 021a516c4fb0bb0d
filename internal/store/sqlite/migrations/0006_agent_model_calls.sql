-- An agent's cap on the model calls of one turn (its own and its script's
-- ai() sub-calls); 0 means the fleet's default.
ALTER TABLE agents ADD COLUMN max_model_calls_per_turn integer NOT NULL DEFAULT 0;
