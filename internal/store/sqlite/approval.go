package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const approvalCols = `seq, id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview, status, reason, scope,
	decided_by, created_at, decided_at, expires_at, notify_url, notify_state, notify_attempts, notify_next_at, notify_error, digest`

// sameCallSQL matches a grant's primitive to the call's (given twice):
// the same, or fetch and http, which make the same HTTP requests.
const sameCallSQL = `(primitive = ? OR (primitive IN ('fetch', 'http') AND ? IN ('fetch', 'http')))`

// scanApprovalSeq reads an approval and its list position.
func scanApprovalSeq(sc interface{ Scan(...any) error }) (store.Approval, int64, error) {
	var a store.Approval
	var seq, created, expires int64
	var decided, notifyNext sql.NullInt64
	err := sc.Scan(&seq, &a.ID, &a.Tenant, &a.RunID, &a.SessionID, &a.Turn, &a.Index, &a.Primitive, &a.Method, &a.URL, &a.Preview,
		&a.Status, &a.Reason, &a.Scope, &a.DecidedBy, &created, &decided, &expires, &a.NotifyURL, &a.NotifyState, &a.NotifyAttempts,
		&notifyNext, &a.NotifyError, &a.Digest)
	a.CreatedAt, a.DecidedAt, a.ExpiresAt, a.NotifyNextAt = fromMicros(created), tsVal(decided), fromMicros(expires), tsVal(notifyNext)
	return a, seq, err
}

func scanApproval(sc interface{ Scan(...any) error }) (store.Approval, error) {
	a, _, err := scanApprovalSeq(sc)
	return a, err
}

// approvalTx is the rules' ApprovalTx over SQLite's one write
// transaction, which holds whatever it reads.
type approvalTx struct{ runTx }

func (t approvalTx) ReadApproval(ctx context.Context, id string) (store.Approval, error) {
	a, err := scanApproval(t.tx.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return a, fmt.Errorf("approval %s: %w", id, mapErr(err))
	}
	return a, nil
}

func (t approvalTx) LockApproval(ctx context.Context, id string) (store.Approval, error) {
	return t.ReadApproval(ctx, id)
}

func (t approvalTx) LockApprovalAt(ctx context.Context, runID string, turn, index int, digest string) (store.Approval, error) {
	a, err := scanApproval(t.tx.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals
		WHERE run_id = ? AND turn = ? AND call_index = ? AND digest = ?`, runID, turn, index, digest))
	return a, mapErr(err)
}

func (t approvalTx) InsertApproval(ctx context.Context, a store.Approval) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO approvals (id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview,
			digest, status, scope, created_at, expires_at, notify_url, notify_state, notify_next_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Tenant, a.RunID, a.SessionID, a.Turn, a.Index, a.Primitive, a.Method, a.URL, a.Preview,
		a.Digest, string(a.Status), string(a.Scope), a.CreatedAt.UnixMicro(), a.ExpiresAt.UnixMicro(), a.NotifyURL, string(a.NotifyState), tsArg(a.NotifyNextAt))
	return err
}

func (t approvalTx) UpdateApproval(ctx context.Context, a store.Approval) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE approvals SET status = ?, reason = ?, scope = ?, session_id = ?, decided_by = ?, decided_at = ? WHERE id = ?`,
		string(a.Status), a.Reason, string(a.Scope), a.SessionID, a.DecidedBy, tsArg(a.DecidedAt), a.ID)
	return err
}

func (s *Store) ApprovalRequest(ctx context.Context, p store.ApprovalRequestParams) (store.ApprovalRequestResult, error) {
	p, err := rules.ApprovalRequest(p)
	if err != nil {
		return store.ApprovalRequestResult{}, err
	}
	var res store.ApprovalRequestResult
	err = s.write(ctx, func(tx *wtx) (err error) {
		res, err = rules.ApplyApprovalRequest(ctx, approvalTx{runTx{s, tx}}, p)
		return err
	})
	if err != nil {
		return store.ApprovalRequestResult{}, fmt.Errorf("request approval for run %s turn %d: %w", p.RunID, p.Turn, err)
	}
	return res, nil
}

func (s *Store) ApprovalForCall(ctx context.Context, p store.ApprovalForCallParams) (store.Approval, error) {
	c := p.Call
	// The call's own approval first (the same digest), then a grant of
	// the session (the same method and URL; fetch and http alike).
	a, err := scanApproval(s.rd.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM (
			SELECT 0 AS pri, * FROM approvals WHERE run_id = ? AND turn = ? AND call_index = ? AND digest = ?
			UNION ALL
			SELECT * FROM (SELECT 1 AS pri, * FROM approvals
				WHERE ? <> '' AND tenant = ? AND session_id = ? AND `+sameCallSQL+` AND method = ? AND url = ?
					AND scope = 'session' AND status = 'approved' LIMIT 1)
		) ORDER BY pri LIMIT 1`,
		p.RunID, p.Turn, c.Index, c.Digest, p.SessionID, p.Tenant, p.SessionID, c.Primitive, c.Primitive, c.Method, c.URL))
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval of run %s turn %d call %d: %w", p.RunID, p.Turn, c.Index, mapErr(err))
	}
	return a, nil
}

func (s *Store) ApprovalGetByID(ctx context.Context, p store.ApprovalGetByIDParams) (store.Approval, error) {
	a, err := scanApproval(s.rd.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, p.ID))
	if err == nil && p.Tenant != "" && a.Tenant != p.Tenant {
		err = sql.ErrNoRows
	}
	if err != nil {
		return store.Approval{}, fmt.Errorf("get approval %s: %w", p.ID, mapErr(err))
	}
	return a, nil
}

func (s *Store) ApprovalList(ctx context.Context, p store.ApprovalListParams) (store.ApprovalListResult, error) {
	p, after, err := rules.ApprovalList(p)
	if err != nil {
		return store.ApprovalListResult{}, err
	}
	q := `SELECT ` + approvalCols + ` FROM approvals WHERE (? = '' OR tenant = ?) AND (? = '' OR status = ?) AND (? = '' OR run_id = ?)
		AND (? = 0 OR seq < ?) ORDER BY seq DESC LIMIT ?`
	rows, err := s.rd.QueryContext(ctx, q, p.Tenant, p.Tenant, string(p.Status), string(p.Status), p.RunID, p.RunID, after, after, p.Limit+1)
	if err != nil {
		return store.ApprovalListResult{}, fmt.Errorf("list approvals: %w", mapErr(err))
	}
	defer rows.Close()
	var as []store.Approval
	var seqs []int64
	for rows.Next() {
		a, seq, err := scanApprovalSeq(rows)
		if err != nil {
			return store.ApprovalListResult{}, fmt.Errorf("list approvals: %w", err)
		}
		as, seqs = append(as, a), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return store.ApprovalListResult{}, fmt.Errorf("list approvals: %w", err)
	}
	return rules.ApprovalPage(as, seqs, p), nil
}

func (s *Store) ApprovalDecide(ctx context.Context, p store.ApprovalDecideParams) (store.ApprovalDecideResult, error) {
	p, err := rules.ApprovalDecide(p)
	if err != nil {
		return store.ApprovalDecideResult{}, err
	}
	var res store.ApprovalDecideResult
	err = s.write(ctx, func(tx *wtx) (err error) {
		res, err = rules.ApplyApprovalDecide(ctx, approvalTx{runTx{s, tx}}, p)
		return err
	})
	if err != nil {
		return store.ApprovalDecideResult{}, fmt.Errorf("decide approval %s: %w", p.ID, err)
	}
	return res, nil
}

func (s *Store) ApprovalExpire(ctx context.Context, p store.ApprovalExpireParams) ([]store.ApprovalDecideResult, error) {
	now := rules.NowOr(p.Now)
	rows, err := s.rd.QueryContext(ctx, `SELECT a.id, CASE WHEN r.status IN (`+terminalList+`) THEN ? ELSE ? END
		FROM approvals a JOIN runs r ON r.id = a.run_id
		WHERE a.status = 'pending' AND (a.expires_at <= ? OR r.status IN (`+terminalList+`)) ORDER BY a.expires_at LIMIT ?`,
		store.ApprovalRunEnded, store.ApprovalExpired, now.UnixMicro(), rules.ApprovalExpireLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("find expired approvals: %w", mapErr(err))
	}
	var ids, reasons []string
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find expired approvals: %w", err)
		}
		ids, reasons = append(ids, id), append(reasons, reason)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find expired approvals: %w", err)
	}
	return rules.ExpireApprovals(ctx, ids, reasons, now, s.ApprovalDecide)
}

func (s *Store) ApprovalCountPending(ctx context.Context) (map[string]int, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT tenant, count(*) FROM approvals WHERE status = 'pending' GROUP BY tenant`)
	if err != nil {
		return nil, fmt.Errorf("count pending approvals: %w", mapErr(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var t string
		var n int
		if err := rows.Scan(&t, &n); err != nil {
			return nil, fmt.Errorf("count pending approvals: %w", err)
		}
		out[t] = n
	}
	return out, rows.Err()
}

func (s *Store) ApprovalNotifyClaim(ctx context.Context, p store.ApprovalNotifyClaimParams) ([]store.Approval, error) {
	now := rules.NowOr(p.Now)
	var as []store.Approval
	err := s.write(ctx, func(tx *wtx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE approvals SET notify_next_at = ?
			WHERE id IN (SELECT id FROM approvals WHERE notify_state = 'pending' AND notify_next_at <= ? ORDER BY notify_next_at LIMIT ?)
			RETURNING `+approvalCols, now.Add(p.Lease).UnixMicro(), now.UnixMicro(), max(p.Limit, 1))
		if err != nil {
			return err
		}
		as, err = collect(rows, scanApproval)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim approval notifications: %w", err)
	}
	return as, nil
}

func (s *Store) ApprovalNotifyRecord(ctx context.Context, p store.ApprovalNotifyRecordParams) error {
	p, err := rules.ApprovalNotifyRecord(p)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE approvals SET notify_state = ?, notify_attempts = notify_attempts + 1, notify_next_at = ?,
			notify_error = ? WHERE id = ?`, string(p.State), tsArg(p.NextAt), p.Error, p.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record approval notification %s: %w", p.ID, err)
	}
	return nil
}
