package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const approvalCols = `seq, id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview, status, reason, scope,
	decided_by, created_at, decided_at, expires_at, notify_url, notify_state, notify_attempts, notify_next_at, notify_error, digest`

// approvalRow is an approval and its list position.
type approvalRow struct {
	store.Approval
	seq int64
}

func scanApprovalRow(sc scanner) (approvalRow, error) {
	var r approvalRow
	a := &r.Approval
	var decided, notifyNext *time.Time
	err := sc.Scan(&r.seq, &a.ID, &a.Tenant, &a.RunID, &a.SessionID, &a.Turn, &a.Index, &a.Primitive, &a.Method, &a.URL, &a.Preview,
		&a.Status, &a.Reason, &a.Scope, &a.DecidedBy, &a.CreatedAt, &decided, &a.ExpiresAt, &a.NotifyURL, &a.NotifyState, &a.NotifyAttempts,
		&notifyNext, &a.NotifyError, &a.Digest)
	a.CreatedAt, a.DecidedAt, a.ExpiresAt, a.NotifyNextAt = a.CreatedAt.UTC(), tsVal(decided), a.ExpiresAt.UTC(), tsVal(notifyNext)
	return r, err
}

func scanApproval(sc scanner) (store.Approval, error) {
	r, err := scanApprovalRow(sc)
	return r.Approval, err
}

// approvalTx is the rules' ApprovalTx over a pgx transaction.
type approvalTx struct{ runTx }

func (t approvalTx) approval(ctx context.Context, what, q string, args ...any) (store.Approval, error) {
	a, err := scanApproval(t.tx.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("approval %s: %w", what, store.ErrNotFound)
	}
	return a, err
}

func (t approvalTx) ReadApproval(ctx context.Context, id string) (store.Approval, error) {
	return t.approval(ctx, id, `SELECT `+approvalCols+` FROM approvals WHERE id = $1`, id)
}

func (t approvalTx) LockApproval(ctx context.Context, id string) (store.Approval, error) {
	return t.approval(ctx, id, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 FOR UPDATE`, id)
}

func (t approvalTx) LockApprovalAt(ctx context.Context, runID string, turn, index int, digest string) (store.Approval, error) {
	return t.approval(ctx, fmt.Sprintf("of run %s turn %d call %d", runID, turn, index),
		`SELECT `+approvalCols+` FROM approvals WHERE run_id = $1 AND turn = $2 AND call_index = $3 AND digest = $4 FOR UPDATE`,
		runID, turn, index, digest)
}

func (t approvalTx) InsertApproval(ctx context.Context, a store.Approval) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO approvals (id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview,
			digest, status, scope, created_at, expires_at, notify_url, notify_state, notify_next_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
		a.ID, a.Tenant, a.RunID, a.SessionID, a.Turn, a.Index, a.Primitive, a.Method, a.URL, a.Preview,
		a.Digest, string(a.Status), string(a.Scope), a.CreatedAt, a.ExpiresAt, a.NotifyURL, string(a.NotifyState), tsArg(a.NotifyNextAt))
	return err
}

func (t approvalTx) UpdateApproval(ctx context.Context, a store.Approval) error {
	_, err := t.tx.Exec(ctx, `UPDATE approvals SET status = $2, reason = $3, scope = $4, session_id = $5, decided_by = $6, decided_at = $7 WHERE id = $1`,
		a.ID, string(a.Status), a.Reason, string(a.Scope), a.SessionID, a.DecidedBy, tsArg(a.DecidedAt))
	return err
}

func (s *Store) ApprovalRequest(ctx context.Context, p store.ApprovalRequestParams) (store.ApprovalRequestResult, error) {
	p, err := rules.ApprovalRequest(p)
	if err != nil {
		return store.ApprovalRequestResult{}, err
	}
	var res store.ApprovalRequestResult
	err = s.withTx(ctx, func(tx pgx.Tx) (err error) {
		res, err = rules.ApplyApprovalRequest(ctx, approvalTx{runTx{tx}}, p)
		return err
	})
	if err = mapErr(err); err != nil {
		return store.ApprovalRequestResult{}, fmt.Errorf("request approval for run %s turn %d: %w", p.RunID, p.Turn, err)
	}
	return res, nil
}

func (s *Store) ApprovalForCall(ctx context.Context, p store.ApprovalForCallParams) (store.Approval, error) {
	c := p.Call
	// The call's own approval first (the same digest), then a grant of
	// the session (the same method and URL; fetch and http alike).
	a, err := queryOne(ctx, s, `SELECT `+approvalCols+` FROM (
			(SELECT *, 0 AS pri FROM approvals WHERE run_id = $1 AND turn = $2 AND call_index = $3 AND digest = $9)
			UNION ALL
			(SELECT *, 1 AS pri FROM approvals
				WHERE $4 <> '' AND tenant = $5 AND session_id = $4
					AND (primitive = $6 OR (primitive IN ('fetch', 'http') AND $6 IN ('fetch', 'http')))
					AND method = $7 AND url = $8 AND scope = 'session' AND status = 'approved' LIMIT 1)
		) AS found ORDER BY pri LIMIT 1`, scanApproval,
		p.RunID, p.Turn, c.Index, p.SessionID, p.Tenant, c.Primitive, c.Method, c.URL, c.Digest)
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval of run %s turn %d call %d: %w", p.RunID, p.Turn, c.Index, err)
	}
	return a, nil
}

func (s *Store) ApprovalGetByID(ctx context.Context, p store.ApprovalGetByIDParams) (store.Approval, error) {
	a, err := queryOne(ctx, s, `SELECT `+approvalCols+` FROM approvals WHERE id = $1 AND ($2 = '' OR tenant = $2)`, scanApproval, p.ID, p.Tenant)
	if err != nil {
		return store.Approval{}, fmt.Errorf("get approval %s: %w", p.ID, err)
	}
	return a, nil
}

func (s *Store) ApprovalList(ctx context.Context, p store.ApprovalListParams) (store.ApprovalListResult, error) {
	p, after, err := rules.ApprovalList(p)
	if err != nil {
		return store.ApprovalListResult{}, err
	}
	rows, err := queryAll(ctx, s, `SELECT `+approvalCols+` FROM approvals
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR status = $2) AND ($3 = '' OR run_id = $3) AND ($4 = 0 OR seq < $4)
		ORDER BY seq DESC LIMIT $5`, scanApprovalRow, p.Tenant, string(p.Status), p.RunID, after, p.Limit+1)
	if err != nil {
		return store.ApprovalListResult{}, fmt.Errorf("list approvals: %w", err)
	}
	as := make([]store.Approval, len(rows))
	seqs := make([]int64, len(rows))
	for i, r := range rows {
		as[i], seqs[i] = r.Approval, r.seq
	}
	return rules.ApprovalPage(as, seqs, p), nil
}

func (s *Store) ApprovalDecide(ctx context.Context, p store.ApprovalDecideParams) (store.ApprovalDecideResult, error) {
	p, err := rules.ApprovalDecide(p)
	if err != nil {
		return store.ApprovalDecideResult{}, err
	}
	var res store.ApprovalDecideResult
	err = s.withTx(ctx, func(tx pgx.Tx) (err error) {
		res, err = rules.ApplyApprovalDecide(ctx, approvalTx{runTx{tx}}, p)
		return err
	})
	if err = mapErr(err); err != nil {
		return store.ApprovalDecideResult{}, fmt.Errorf("decide approval %s: %w", p.ID, err)
	}
	return res, nil
}

func (s *Store) ApprovalExpire(ctx context.Context, p store.ApprovalExpireParams) ([]store.ApprovalDecideResult, error) {
	now := rules.NowOr(p.Now)
	type due struct{ id, reason string }
	found, err := queryAll(ctx, s, `SELECT a.id, CASE WHEN r.status IN (`+terminalList+`) THEN $1 ELSE $2 END
		FROM approvals a JOIN runs r ON r.id = a.run_id
		WHERE a.status = 'pending' AND (a.expires_at <= $3 OR r.status IN (`+terminalList+`)) ORDER BY a.expires_at LIMIT $4`,
		func(sc scanner) (due, error) {
			var d due
			return d, sc.Scan(&d.id, &d.reason)
		}, store.ApprovalRunEnded, store.ApprovalExpired, now, rules.ApprovalExpireLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("find expired approvals: %w", err)
	}
	ids, reasons := make([]string, len(found)), make([]string, len(found))
	for i, d := range found {
		ids[i], reasons[i] = d.id, d.reason
	}
	return rules.ExpireApprovals(ctx, ids, reasons, now, s.ApprovalDecide)
}

func (s *Store) ApprovalCountPending(ctx context.Context) (map[string]int, error) {
	type count struct {
		tenant string
		n      int
	}
	cs, err := queryAll(ctx, s, `SELECT tenant, count(*) FROM approvals WHERE status = 'pending' GROUP BY tenant`,
		func(sc scanner) (count, error) {
			var c count
			return c, sc.Scan(&c.tenant, &c.n)
		})
	if err != nil {
		return nil, fmt.Errorf("count pending approvals: %w", err)
	}
	out := make(map[string]int, len(cs))
	for _, c := range cs {
		out[c.tenant] = c.n
	}
	return out, nil
}

// ApprovalNotifyClaim skips rows another claim holds locked, so
// dispatchers claiming at once take different notifications.
func (s *Store) ApprovalNotifyClaim(ctx context.Context, p store.ApprovalNotifyClaimParams) ([]store.Approval, error) {
	now := rules.NowOr(p.Now)
	as, err := queryAll(ctx, s, `UPDATE approvals SET notify_next_at = $1
		WHERE id IN (SELECT id FROM approvals WHERE notify_state = 'pending' AND notify_next_at <= $2
			ORDER BY notify_next_at LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING `+approvalCols, scanApproval, now.Add(p.Lease), now, max(p.Limit, 1))
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
	err = s.withConn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE approvals SET notify_state = $2, notify_attempts = notify_attempts + 1, notify_next_at = $3,
			notify_error = $4 WHERE id = $1`, p.ID, string(p.State), tsArg(p.NextAt), p.Error)
		if err == nil && tag.RowsAffected() == 0 {
			err = store.ErrNotFound
		}
		return err
	})
	if err = mapErr(err); err != nil {
		return fmt.Errorf("record approval notification %s: %w", p.ID, err)
	}
	return nil
}
