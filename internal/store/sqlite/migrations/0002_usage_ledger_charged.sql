-- The usage ledger is what an unlimited tenant's budget is read from
-- (BudgetGet sums what it charged over the window; TenantUpdate does the
-- same when it gives the tenant a limit), and both find windows by the
-- first entry after a time. This index serves all of those from the index
-- alone (charged included), and replaces 0001's (tenant, created_at),
-- whose every use it covers too.
CREATE INDEX usage_ledger_tenant_charged ON usage_ledger (tenant, created_at, charged);
DROP INDEX usage_ledger_tenant;
