package postgres

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) CallbackSecretUpsert(ctx context.Context, tenant, secret string, now time.Time) error {
	_, err := e.run(ctx, rules.CallbackSecretUpsertSQL, tenant, secret, now)
	return err
}

func (e exec) CallbackSecretGet(ctx context.Context, tenant string) (string, error) {
	return one(ctx, e, `SELECT secret FROM tenant_callback_secrets WHERE tenant = $1`, rules.ScanString, tenant)
}

func (e exec) RunCallbackInsert(ctx context.Context, runID, tenant, url string, now time.Time) (store.RunCallback, error) {
	return one(ctx, e, rules.RunCallbackInsertSQL, scans.Callback, runID, tenant, url, now)
}

func (e exec) RunCallbackGet(ctx context.Context, runID string) (store.RunCallback, error) {
	return one(ctx, e, `SELECT `+rules.CallbackCols+` FROM run_callbacks WHERE run_id = $1`, scans.Callback, runID)
}

func (e exec) RunCallbackClaim(ctx context.Context, now, until time.Time, limit int) ([]store.RunCallback, error) {
	return all(ctx, e, `UPDATE run_callbacks SET next_at = $2, updated_at = $1
		WHERE run_id IN (
			SELECT c.run_id FROM run_callbacks c JOIN runs r ON r.id = c.run_id
			WHERE c.state = 'pending' AND c.next_at <= $1 AND r.status IN (`+rules.TerminalSQL+`)
			ORDER BY c.next_at LIMIT $3 FOR UPDATE OF c SKIP LOCKED)
		RETURNING `+rules.CallbackCols, scans.Callback, now, until, limit)
}

func (e exec) RunCallbackLogLock(ctx context.Context, runID string) ([]byte, error) {
	return one(ctx, e, `SELECT attempt_log FROM run_callbacks WHERE run_id = $1 FOR UPDATE`, rules.ScanBytes, runID)
}

func (e exec) RunCallbackUpdate(ctx context.Context, p driver.RunCallbackUpdateParams) (store.RunCallback, error) {
	return one(ctx, e, rules.RunCallbackUpdateSQL, scans.Callback, p.RunID, string(p.State), p.Log, p.NextAt, p.FirstAt, p.Now)
}

func (e exec) RunCallbackDeleteOrphans(ctx context.Context, before time.Time) (int, error) {
	n, err := e.run(ctx, `DELETE FROM run_callbacks c WHERE c.created_at < $1 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = c.run_id)`, before)
	return int(n), err
}
