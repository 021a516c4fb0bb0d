package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (t exec) approval(ctx context.Context, what, q string, args ...any) (store.Approval, error) {
	a, err := one(ctx, t, q, scans.Approval, args...)
	if err != nil {
		return a, fmt.Errorf("approval %s: %w", what, err)
	}
	return a, nil
}

func (t exec) ApprovalGet(ctx context.Context, id string) (store.Approval, error) {
	return t.approval(ctx, id, `SELECT `+rules.ApprovalCols+` FROM approvals WHERE id = $1`, id)
}

func (t exec) ApprovalLock(ctx context.Context, id string) (store.Approval, error) {
	return t.approval(ctx, id, `SELECT `+rules.ApprovalCols+` FROM approvals WHERE id = $1 FOR UPDATE`, id)
}

func (t exec) ApprovalLockAt(ctx context.Context, runID string, turn, index int, digest string) (store.Approval, error) {
	return t.approval(ctx, fmt.Sprintf("of run %s turn %d call %d", runID, turn, index),
		`SELECT `+rules.ApprovalCols+` FROM approvals WHERE run_id = $1 AND turn = $2 AND call_index = $3 AND digest = $4 FOR UPDATE`,
		runID, turn, index, digest)
}

func (t exec) ApprovalInsert(ctx context.Context, a store.Approval) error {
	_, err := t.run(ctx, rules.ApprovalInsertSQL,
		a.ID, a.Tenant, a.RunID, a.SessionID, a.Turn, a.Index, a.Primitive, a.Method, a.URL, a.Preview,
		a.Digest, string(a.Status), string(a.Scope), a.CreatedAt, a.ExpiresAt, a.NotifyURL, string(a.NotifyState), tsArg(a.NotifyNextAt))
	return err
}

func (t exec) ApprovalUpdate(ctx context.Context, a store.Approval) error {
	_, err := t.run(ctx, `UPDATE approvals SET status = $2, reason = $3, scope = $4, session_id = $5, decided_by = $6, decided_at = $7 WHERE id = $1`,
		a.ID, string(a.Status), a.Reason, string(a.Scope), a.SessionID, a.DecidedBy, tsArg(a.DecidedAt))
	return err
}

func (t exec) ApprovalGetForCall(ctx context.Context, p store.ApprovalGetForCallParams) (store.Approval, error) {
	c := p.Call
	// The call's own approval first (the same digest), then a grant of
	// the session (the same method and URL; fetch and http alike).
	return one(ctx, t, `SELECT `+rules.ApprovalCols+` FROM (
			(SELECT *, 0 AS pri FROM approvals WHERE run_id = $1 AND turn = $2 AND call_index = $3 AND digest = $9)
			UNION ALL
			(SELECT *, 1 AS pri FROM approvals
				WHERE $4 <> '' AND tenant = $5 AND session_id = $4
					AND (primitive = $6 OR (primitive IN ('fetch', 'http') AND $6 IN ('fetch', 'http')))
					AND method = $7 AND url = $8 AND scope = 'session' AND status = 'approved' LIMIT 1)
		) AS found ORDER BY pri LIMIT 1`, scans.Approval,
		p.RunID, p.Turn, c.Index, p.SessionID, p.Tenant, c.Primitive, c.Method, c.URL, c.Digest)
}

func (t exec) ApprovalList(ctx context.Context, p driver.ApprovalListParams) ([]driver.ApprovalRow, error) {
	return all(ctx, t, rules.ApprovalListSQL, scans.ApprovalRow, p.Tenant, string(p.Status), p.RunID, p.AfterSeq, p.Limit)
}

func (t exec) ApprovalListDue(ctx context.Context, now time.Time, limit int) ([]driver.ApprovalDue, error) {
	return all(ctx, t, rules.ApprovalListDueSQL, rules.ScanApprovalDue, now, limit)
}

func (t exec) ApprovalCountPending(ctx context.Context) ([]driver.Count, error) {
	return all(ctx, t, `SELECT tenant, count(*) FROM approvals WHERE status = 'pending' GROUP BY tenant`, rules.ScanCount)
}

func (t exec) ApprovalNotifyClaim(ctx context.Context, now, until time.Time, limit int) ([]store.Approval, error) {
	return all(ctx, t, `UPDATE approvals SET notify_next_at = $1
		WHERE id IN (SELECT id FROM approvals WHERE notify_state = 'pending' AND notify_next_at <= $2
			ORDER BY notify_next_at LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING `+rules.ApprovalCols, scans.Approval, until, now, limit)
}

func (t exec) ApprovalNotifyUpdate(ctx context.Context, p store.ApprovalNotifyRecordParams) (bool, error) {
	n, err := t.run(ctx, rules.ApprovalNotifyUpdateSQL, p.ID, string(p.State), tsArg(p.NextAt), p.Error)
	return n > 0, err
}
