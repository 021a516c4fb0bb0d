package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// sameCallSQL matches a grant's primitive to the call's (given twice):
// the same, or fetch and http, which make the same HTTP requests.
const sameCallSQL = `(primitive = ? OR (primitive IN ('fetch', 'http') AND ? IN ('fetch', 'http')))`

func (t exec) ApprovalGet(ctx context.Context, id string) (store.Approval, error) {
	a, err := scans.Approval(t.q.QueryRowContext(ctx, `SELECT `+rules.ApprovalCols+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return a, fmt.Errorf("approval %s: %w", id, mapErr(err))
	}
	return a, nil
}

func (t exec) ApprovalLock(ctx context.Context, id string) (store.Approval, error) {
	return t.ApprovalGet(ctx, id)
}

func (t exec) ApprovalLockAt(ctx context.Context, runID string, turn, index int, digest string) (store.Approval, error) {
	a, err := scans.Approval(t.q.QueryRowContext(ctx, `SELECT `+rules.ApprovalCols+` FROM approvals
		WHERE run_id = ? AND turn = ? AND call_index = ? AND digest = ?`, runID, turn, index, digest))
	return a, mapErr(err)
}

func (t exec) ApprovalInsert(ctx context.Context, a store.Approval) error {
	_, err := t.run(ctx, rules.ApprovalInsertSQL,
		a.ID, a.Tenant, a.RunID, a.SessionID, a.Turn, a.Index, a.Primitive, a.Method, a.URL, a.Preview,
		a.Digest, string(a.Status), string(a.Scope), a.CreatedAt.UnixMicro(), a.ExpiresAt.UnixMicro(), a.NotifyURL, string(a.NotifyState), tsArg(a.NotifyNextAt))
	return err
}

func (t exec) ApprovalUpdate(ctx context.Context, a store.Approval) error {
	_, err := t.run(ctx, `UPDATE approvals SET status = ?, reason = ?, scope = ?, session_id = ?, decided_by = ?, decided_at = ? WHERE id = ?`,
		string(a.Status), a.Reason, string(a.Scope), a.SessionID, a.DecidedBy, tsArg(a.DecidedAt), a.ID)
	return err
}

func (t exec) ApprovalGetForCall(ctx context.Context, p store.ApprovalGetForCallParams) (store.Approval, error) {
	c := p.Call
	// The call's own approval first (the same digest), then a grant of
	// the session (the same method and URL; fetch and http alike).
	return one(ctx, t, `SELECT `+rules.ApprovalCols+` FROM (
			SELECT 0 AS pri, * FROM approvals WHERE run_id = ? AND turn = ? AND call_index = ? AND digest = ?
			UNION ALL
			SELECT * FROM (SELECT 1 AS pri, * FROM approvals
				WHERE ? <> '' AND tenant = ? AND session_id = ? AND `+sameCallSQL+`
					AND method = ? AND url = ? AND scope = 'session' AND status = 'approved' LIMIT 1)
		) ORDER BY pri LIMIT 1`, scans.Approval,
		p.RunID, p.Turn, c.Index, c.Digest, p.SessionID, p.Tenant, p.SessionID, c.Primitive, c.Primitive, c.Method, c.URL)
}

func (t exec) ApprovalList(ctx context.Context, p driver.ApprovalListParams) ([]driver.ApprovalRow, error) {
	return all(ctx, t, rules.ApprovalListSQL, scans.ApprovalRow, p.Tenant, string(p.Status), p.RunID, p.AfterSeq, p.Limit)
}

func (t exec) ApprovalListDue(ctx context.Context, now time.Time, limit int) ([]driver.ApprovalDue, error) {
	return all(ctx, t, rules.ApprovalListDueSQL, rules.ScanApprovalDue, now.UnixMicro(), limit)
}

func (t exec) ApprovalCountPending(ctx context.Context) ([]driver.Count, error) {
	return all(ctx, t, `SELECT tenant, count(*) FROM approvals WHERE status = 'pending' GROUP BY tenant`, rules.ScanCount)
}

func (t exec) ApprovalNotifyClaim(ctx context.Context, now, until time.Time, limit int) ([]store.Approval, error) {
	return rows(ctx, t, `UPDATE approvals SET notify_next_at = ?
		WHERE id IN (SELECT id FROM approvals WHERE notify_state = 'pending' AND notify_next_at <= ? ORDER BY notify_next_at LIMIT ?)
		RETURNING `+rules.ApprovalCols, scans.Approval, until.UnixMicro(), now.UnixMicro(), limit)
}

func (t exec) ApprovalNotifyUpdate(ctx context.Context, p store.ApprovalNotifyRecordParams) (bool, error) {
	n, err := t.run(ctx, rules.ApprovalNotifyUpdateSQL, p.ID, string(p.State), tsArg(p.NextAt), p.Error)
	return n > 0, err
}
