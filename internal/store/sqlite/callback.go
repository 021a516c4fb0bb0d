package sqlite

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) CallbackSecretUpsert(ctx context.Context, tenant, secret string, now time.Time) error {
	_, err := e.run(ctx, rules.CallbackSecretUpsertSQL, tenant, secret, now.UnixMicro())
	return err
}

func (e exec) CallbackSecretGet(ctx context.Context, tenant string) (string, error) {
	return one(ctx, e, `SELECT secret FROM tenant_callback_secrets WHERE tenant = ?`, rules.ScanString, tenant)
}

func (e exec) RunCallbackInsert(ctx context.Context, runID, tenant, url string, now time.Time) (store.RunCallback, error) {
	return row(ctx, e, rules.RunCallbackInsertSQL, scans.Callback, runID, tenant, url, now.UnixMicro())
}

func (e exec) RunCallbackGet(ctx context.Context, runID string) (store.RunCallback, error) {
	return one(ctx, e, `SELECT `+rules.CallbackCols+` FROM run_callbacks WHERE run_id = ?`, scans.Callback, runID)
}

func (e exec) RunCallbackClaim(ctx context.Context, now, until time.Time, limit int) ([]store.RunCallback, error) {
	return rows(ctx, e, `UPDATE run_callbacks SET next_at = ?, updated_at = ?
		WHERE run_id IN (
			SELECT c.run_id FROM run_callbacks c JOIN runs r ON r.id = c.run_id
			WHERE c.state = 'pending' AND c.next_at <= ? AND r.status IN (`+rules.TerminalSQL+`)
			ORDER BY c.next_at LIMIT ?)
		RETURNING `+rules.CallbackCols, scans.Callback, until.UnixMicro(), now.UnixMicro(), now.UnixMicro(), limit)
}

// RunCallbackLogLock reads the log; the one writer is the lock.
func (e exec) RunCallbackLogLock(ctx context.Context, runID string) ([]byte, error) {
	return one(ctx, e, `SELECT attempt_log FROM run_callbacks WHERE run_id = ?`, rules.ScanBytes, runID)
}

func (e exec) RunCallbackUpdate(ctx context.Context, p driver.RunCallbackUpdateParams) (store.RunCallback, error) {
	return row(ctx, e, rules.RunCallbackUpdateSQL, scans.Callback,
		p.RunID, string(p.State), string(p.Log), p.NextAt.UnixMicro(), p.FirstAt.UnixMicro(), p.Now.UnixMicro())
}

func (e exec) RunCallbackDeleteOrphans(ctx context.Context, before time.Time) (int, error) {
	n, err := e.run(ctx, `DELETE FROM run_callbacks WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = run_callbacks.run_id)`, before.UnixMicro())
	return int(n), err
}
