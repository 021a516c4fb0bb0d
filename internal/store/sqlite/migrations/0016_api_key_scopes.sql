-- An API key's scopes (docs/api.md, "API keys"): a comma-separated list of admin,
-- submit and read. Keys made before scopes existed may do everything,
-- as they did.
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT 'admin,submit,read';
