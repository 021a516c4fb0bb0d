-- The usage ledger is what an unlimited tenant's budget is read from
-- (BudgetGet sums what it charged over the window; TenantUpdate does the
-- same when it gives the tenant a limit), and both find windows by the
-- first entry after a time. This index serves all of those with
-- index-only scans (charged included), and replaces 0001's
-- (tenant, created_at), whose every use it covers too.
--
-- Migrations run in one transaction, so this is a plain CREATE INDEX: it
-- blocks writes to usage_ledger while it builds. On a large ledger, build
-- it beforehand with CREATE INDEX CONCURRENTLY under this name; the IF NOT
-- EXISTS then skips it.
CREATE INDEX IF NOT EXISTS usage_ledger_tenant_charged ON usage_ledger (tenant, created_at) INCLUDE (charged);
DROP INDEX IF EXISTS usage_ledger_tenant;
