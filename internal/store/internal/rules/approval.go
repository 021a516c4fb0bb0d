package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Bounds of what an approval stores.
const (
	approvalURLMax     = 4096
	approvalPreviewMax = 4096
	approvalReasonMax  = 1000
	// ApprovalListLimitDefault and ApprovalListLimitMax bound a page.
	ApprovalListLimitDefault = 50
	ApprovalListLimitMax     = 1000
	// ApprovalExpireLimitDefault bounds one ApprovalExpire call.
	ApprovalExpireLimitDefault = 100
)

// ApprovalRequest validates p and fills its defaults.
func ApprovalRequest(p store.ApprovalRequestParams) (store.ApprovalRequestParams, error) {
	c := &p.Call
	switch {
	case p.RunID == "" || c.Primitive == "":
		return p, Invalidf("approval: run id and primitive are required")
	case p.Turn < 1 || c.Index < 0:
		return p, Invalidf("approval: turn must be positive and the call index not negative")
	case p.Timeout < 0:
		return p, Invalidf("approval: timeout must not be negative")
	case len(c.URL) > approvalURLMax:
		return p, Invalidf("approval: url is longer than %d bytes", approvalURLMax)
	case c.Digest != "" && !isDigest(c.Digest):
		return p, Invalidf("approval: request digest %q is not a hex SHA-256", c.Digest)
	}
	if err := checkTexts("approval primitive", c.Primitive, "approval method", c.Method, "approval url", c.URL,
		"approval notify url", p.NotifyURL); err != nil {
		return p, err
	}
	c.Preview = Clean(c.Preview)
	if len(c.Preview) > approvalPreviewMax {
		c.Preview = Clean(c.Preview[:approvalPreviewMax])
	}
	if p.Timeout == 0 {
		p.Timeout = agentfleet.ApprovalTimeoutDefault.D()
	}
	p.Now = NowOr(p.Now)
	return p, nil
}

// isDigest reports whether s is a hex SHA-256, in lower case.
func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ApprovalDecide validates p and fills its defaults.
func ApprovalDecide(p store.ApprovalDecideParams) (store.ApprovalDecideParams, error) {
	switch p.Scope {
	case "":
		p.Scope = store.ApprovalScopeCall
	case store.ApprovalScopeCall, store.ApprovalScopeSession:
	default:
		return p, Invalidf("approval scope %q: use %q or %q", p.Scope, store.ApprovalScopeCall, store.ApprovalScopeSession)
	}
	if p.Scope == store.ApprovalScopeSession && !p.Approve {
		return p, Invalidf("approval scope %q grants a call for the session: it goes with an approval, not a denial", p.Scope)
	}
	if len(p.Reason) > approvalReasonMax {
		return p, Invalidf("approval reason is longer than %d bytes", approvalReasonMax)
	}
	if err := checkTexts("approval id", p.ID, "approval reason", p.Reason, "approval decided by", p.DecidedBy); err != nil {
		return p, err
	}
	p.Now = NowOr(p.Now)
	return p, nil
}

// ApprovalList validates p and fills its defaults; it returns the
// position the cursor continues after (zero: from the start).
func ApprovalList(p store.ApprovalListParams) (store.ApprovalListParams, int64, error) {
	if p.Limit < 0 {
		return p, 0, Invalidf("approval list: limit must not be negative")
	}
	if p.Limit == 0 {
		p.Limit = ApprovalListLimitDefault
	}
	p.Limit = min(p.Limit, ApprovalListLimitMax)
	switch p.Status {
	case "", store.ApprovalPending, store.ApprovalApproved, store.ApprovalDenied:
	default:
		return p, 0, Invalidf("approval status %q: use pending, approved or denied", p.Status)
	}
	if err := checkTexts("approval list: tenant", p.Tenant, "approval list: run id", p.RunID); err != nil {
		return p, 0, err
	}
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, false)
	return p, after, err
}

// ApprovalPage is ApprovalList p's answer from the rows read (one more
// than p.Limit when a page follows) and their seqs.
func ApprovalPage(as []store.Approval, seqs []int64, p store.ApprovalListParams) store.ApprovalListResult {
	var res store.ApprovalListResult
	if len(as) > p.Limit {
		as, seqs = as[:p.Limit], seqs[:p.Limit]
		res.NextCursor = EncodeCursor(false, seqs[len(seqs)-1])
	}
	res.Approvals = as
	return res
}

// ApplyApprovalRequest is ApprovalRequest p, checked by ApprovalRequest,
// applied in tx.
func ApplyApprovalRequest(ctx context.Context, tx driver.Executor, p store.ApprovalRequestParams) (store.ApprovalRequestResult, error) {
	var res store.ApprovalRequestResult
	now := p.Now
	cur, err := tx.RunLock(ctx, p.RunID)
	if err != nil {
		return res, err
	}
	if err := CheckCommitFence(cur.Run, p.Turn, ""); err != nil {
		return res, err
	}
	switch {
	case cur.Status != agentfleet.StatusRunning:
		return res, fmt.Errorf("%w: run %s is %s, not running", store.ErrConflict, cur.ID, cur.Status)
	case cur.CancelRequested:
		return res, fmt.Errorf("%w: run %s has a cancel requested", store.ErrConflict, cur.ID)
	}
	a, err := tx.ApprovalLockAt(ctx, p.RunID, p.Turn, p.Call.Index, p.Call.Digest)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a = store.Approval{
			ID: NewID(), Tenant: cur.Tenant, RunID: cur.ID, SessionID: cur.SessionID, Turn: p.Turn, ApprovalCall: p.Call,
			Status: store.ApprovalPending, Scope: store.ApprovalScopeCall, CreatedAt: now, ExpiresAt: Time(now.Add(p.Timeout)),
			NotifyURL: p.NotifyURL,
		}
		if p.NotifyURL != "" {
			a.NotifyState, a.NotifyNextAt = store.CallbackPending, now
		}
		if err := tx.ApprovalInsert(ctx, a); err != nil {
			return res, err
		}
	case err != nil:
		return res, err
	}
	res.Approval = a
	if a.Status != store.ApprovalPending {
		// Decided while the turn ran to it: run the turn again now.
		cur.Wake++
		cur.UpdatedAt = now
		row, err := tx.RunUpdate(ctx, cur)
		if err != nil {
			return res, err
		}
		res.Change = store.RunChangeResult{Run: row.Run}
		return res, nil
	}
	evs := []agentfleet.Event{ApprovalEvent(cur.Run, a, agentfleet.EventApprovalRequested, now)}
	row, err := tx.RunUpdate(ctx, Transition(cur, store.RunTransitionParams{To: agentfleet.StatusWaitingApproval, Events: evs}, now))
	if err != nil {
		return res, err
	}
	Number(evs, row.Run, cur.EventSeq)
	if err := tx.EventInsert(ctx, row.ID, cur.EventSeq, evs); err != nil {
		return res, err
	}
	res.Parked, res.Change = true, store.RunChangeResult{Run: row.Run, Events: evs}
	return res, nil
}

// ApplyApprovalDecide is ApprovalDecide p, checked by ApprovalDecide,
// applied in tx.
func ApplyApprovalDecide(ctx context.Context, tx driver.Executor, p store.ApprovalDecideParams) (store.ApprovalDecideResult, error) {
	var res store.ApprovalDecideResult
	now := p.Now
	seen, err := tx.ApprovalGet(ctx, p.ID)
	if err == nil && p.Tenant != "" && seen.Tenant != p.Tenant {
		err = fmt.Errorf("approval %s: %w", p.ID, store.ErrNotFound)
	}
	if err != nil {
		return res, err
	}
	cur, err := tx.RunLock(ctx, seen.RunID)
	if err != nil {
		return res, err
	}
	a, err := tx.ApprovalLock(ctx, p.ID)
	if err != nil {
		return res, err
	}
	// The sweep closes the approvals of runs that ended (denied by the
	// system); a person has nothing left to decide for them.
	closing := cur.Status.Terminal() && !p.Approve && p.DecidedBy == store.ApprovalBySystem
	switch {
	case a.Status != store.ApprovalPending:
		return res, fmt.Errorf("%w: approval %s was %s already, by %s", store.ErrConflict, a.ID, a.Status, a.DecidedBy)
	case cur.Status.Terminal() && !closing:
		return res, fmt.Errorf("%w: run %s has ended (%s): there is nothing left to approve", store.ErrConflict, cur.ID, cur.Status)
	case p.Scope == store.ApprovalScopeSession && cur.SessionID == "":
		return res, Invalidf("run %s has no session: scope %q needs a run with a session_id", cur.ID, p.Scope)
	}
	a.Status, a.Reason, a.Scope, a.DecidedBy, a.DecidedAt = store.ApprovalDenied, p.Reason, p.Scope, p.DecidedBy, now
	typ := agentfleet.EventDenied
	if p.Approve {
		a.Status, typ = store.ApprovalApproved, agentfleet.EventApproved
	}
	a.SessionID = cur.SessionID
	if err := tx.ApprovalUpdate(ctx, a); err != nil {
		return res, err
	}
	if closing {
		res.Approval, res.Change = a, store.RunChangeResult{Run: cur.Run}
		return res, nil
	}
	evs := []agentfleet.Event{ApprovalEvent(cur.Run, a, typ, now)}
	next := cur
	next.EventSeq += int64(len(evs))
	next.UpdatedAt = now
	if cur.Status == agentfleet.StatusWaitingApproval && cur.Turn == a.Turn-1 {
		next.Status = agentfleet.StatusRunning
		next.Wake++
		res.Woken = true
	}
	row, err := tx.RunUpdate(ctx, next)
	if err != nil {
		return res, err
	}
	Number(evs, row.Run, cur.EventSeq)
	if err := tx.EventInsert(ctx, row.ID, cur.EventSeq, evs); err != nil {
		return res, err
	}
	res.Approval, res.Change = a, store.RunChangeResult{Run: row.Run, Events: evs}
	return res, nil
}

// ApprovalEventArgs is the args of an approval's events: what it is for
// and where it stands.
type ApprovalEventArgs struct {
	ID string `json:"approval_id"`
	agentfleet.ApprovalCall
	Status    store.ApprovalStatus `json:"status"`
	Reason    string               `json:"reason,omitempty"`
	Scope     store.ApprovalScope  `json:"scope,omitempty"`
	DecidedBy string               `json:"decided_by,omitempty"`
	ExpiresAt time.Time            `json:"expires_at"`
}

// ApprovalEvent is an event of type typ about approval a of run r.
func ApprovalEvent(r agentfleet.Run, a store.Approval, typ agentfleet.EventType, now time.Time) agentfleet.Event {
	args, _ := json.Marshal(ApprovalEventArgs{ID: a.ID, ApprovalCall: a.ApprovalCall, Status: a.Status, Reason: a.Reason,
		Scope: a.Scope, DecidedBy: a.DecidedBy, ExpiresAt: a.ExpiresAt})
	what := a.Primitive
	if a.URL != "" {
		what += " " + a.Method + " " + a.URL
	}
	var summary string
	switch typ {
	case agentfleet.EventApprovalRequested:
		summary = what + " needs approval " + a.ID
	case agentfleet.EventApproved:
		summary = what + " approved by " + a.DecidedBy
		if a.Scope == store.ApprovalScopeSession {
			summary += " for the session"
		}
	default:
		summary = what + " denied by " + a.DecidedBy
		if a.Reason != "" {
			summary += ": " + a.Reason
		}
	}
	return agentfleet.Event{V: agentfleet.EventVersion, Type: typ, Turn: a.Turn, TS: now, Summary: Clean(summary),
		Content: a.Preview, Args: args}
}

// ExpireReason is why ApprovalExpire denies a pending approval whose run
// is in status st at now: its run ended, or its time ran out ("" when
// neither).
func ExpireReason(a store.Approval, st agentfleet.RunStatus, now time.Time) string {
	switch {
	case st.Terminal():
		return store.ApprovalRunEnded
	case !now.Before(a.ExpiresAt):
		return store.ApprovalExpired
	}
	return ""
}

// ApprovalExpireLimit is ApprovalExpire's limit: n, or the default.
func ApprovalExpireLimit(n int) int {
	if n <= 0 {
		return ApprovalExpireLimitDefault
	}
	return n
}

// ExpireApprovals is ApprovalExpire once a backend has found what is
// due (ids): each denied by decide, in a transaction of its own. One
// decided meanwhile is skipped.
func ExpireApprovals(ctx context.Context, ids []string, reasons []string, now time.Time,
	decide func(ctx context.Context, p store.ApprovalDecideParams) (store.ApprovalDecideResult, error)) ([]store.ApprovalDecideResult, error) {
	var out []store.ApprovalDecideResult
	for i, id := range ids {
		res, err := decide(ctx, store.ApprovalDecideParams{ID: id, Reason: reasons[i], DecidedBy: store.ApprovalBySystem,
			Scope: store.ApprovalScopeCall, Now: now})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("expire approval %s: %w", id, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// ApprovalNotifyRecord validates p.
func ApprovalNotifyRecord(p store.ApprovalNotifyRecordParams) (store.ApprovalNotifyRecordParams, error) {
	switch p.State {
	case store.CallbackPending, store.CallbackDelivered, store.CallbackFailed:
	default:
		return p, Invalidf("approval notify state %q", p.State)
	}
	p.Error = Clean(p.Error)
	if len(p.Error) > approvalReasonMax {
		p.Error = Clean(p.Error[:approvalReasonMax])
	}
	p.NextAt = Time(p.NextAt)
	return p, nil
}

func (s *Store) ApprovalRequest(ctx context.Context, p store.ApprovalRequestParams) (store.ApprovalRequestResult, error) {
	p, err := ApprovalRequest(p)
	if err != nil {
		return store.ApprovalRequestResult{}, err
	}
	var res store.ApprovalRequestResult
	err = s.d.Tx(ctx, func(x driver.Executor) (err error) {
		res, err = ApplyApprovalRequest(ctx, x, p)
		return err
	})
	if err != nil {
		return store.ApprovalRequestResult{}, fmt.Errorf("request approval for run %s turn %d: %w", p.RunID, p.Turn, err)
	}
	return res, nil
}

func (s *Store) ApprovalGetForCall(ctx context.Context, p store.ApprovalGetForCallParams) (store.Approval, error) {
	a, err := s.d.ApprovalGetForCall(ctx, p)
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval of run %s turn %d call %d: %w", p.RunID, p.Turn, p.Call.Index, err)
	}
	return a, nil
}

// ApprovalGetByID scopes the read to p.Tenant when it is set: another
// tenant's approval is not found.
func (s *Store) ApprovalGetByID(ctx context.Context, p store.ApprovalGetByIDParams) (store.Approval, error) {
	a, err := s.d.ApprovalGet(ctx, p.ID)
	if err == nil && p.Tenant != "" && a.Tenant != p.Tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Approval{}, fmt.Errorf("get approval %s: %w", p.ID, err)
	}
	return a, nil
}

func (s *Store) ApprovalList(ctx context.Context, p store.ApprovalListParams) (store.ApprovalListResult, error) {
	p, after, err := ApprovalList(p)
	if err != nil {
		return store.ApprovalListResult{}, err
	}
	rows, err := s.d.ApprovalList(ctx, driver.ApprovalListParams{Tenant: p.Tenant, Status: p.Status, RunID: p.RunID, AfterSeq: after, Limit: p.Limit + 1})
	if err != nil {
		return store.ApprovalListResult{}, fmt.Errorf("list approvals: %w", err)
	}
	as, seqs := make([]store.Approval, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		as[i], seqs[i] = r.Approval, r.Seq
	}
	return ApprovalPage(as, seqs, p), nil
}

func (s *Store) ApprovalDecide(ctx context.Context, p store.ApprovalDecideParams) (store.ApprovalDecideResult, error) {
	p, err := ApprovalDecide(p)
	if err != nil {
		return store.ApprovalDecideResult{}, err
	}
	var res store.ApprovalDecideResult
	err = s.d.Tx(ctx, func(x driver.Executor) (err error) {
		res, err = ApplyApprovalDecide(ctx, x, p)
		return err
	})
	if err != nil {
		return store.ApprovalDecideResult{}, fmt.Errorf("decide approval %s: %w", p.ID, err)
	}
	return res, nil
}

// ApprovalExpire decides each due approval as expired, or as its run's
// end where the run ended.
func (s *Store) ApprovalExpire(ctx context.Context, p store.ApprovalExpireParams) ([]store.ApprovalDecideResult, error) {
	now := NowOr(p.Now)
	due, err := s.d.ApprovalListDue(ctx, now, ApprovalExpireLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("find expired approvals: %w", err)
	}
	ids, reasons := make([]string, len(due)), make([]string, len(due))
	for i, d := range due {
		ids[i], reasons[i] = d.ID, store.ApprovalExpired
		if d.RunEnded {
			reasons[i] = store.ApprovalRunEnded
		}
	}
	return ExpireApprovals(ctx, ids, reasons, now, s.ApprovalDecide)
}

func (s *Store) ApprovalCountPending(ctx context.Context) (map[string]int, error) {
	cs, err := s.d.ApprovalCountPending(ctx)
	if err != nil {
		return nil, fmt.Errorf("count pending approvals: %w", err)
	}
	out := make(map[string]int, len(cs))
	for _, c := range cs {
		out[c.Key] = c.N
	}
	return out, nil
}

func (s *Store) ApprovalNotifyClaim(ctx context.Context, p store.ApprovalNotifyClaimParams) ([]store.Approval, error) {
	now := NowOr(p.Now)
	as, err := s.d.ApprovalNotifyClaim(ctx, now, now.Add(p.Lease), max(p.Limit, 1))
	if err != nil {
		return nil, fmt.Errorf("claim approval notifications: %w", err)
	}
	return as, nil
}

func (s *Store) ApprovalNotifyRecord(ctx context.Context, p store.ApprovalNotifyRecordParams) error {
	p, err := ApprovalNotifyRecord(p)
	if err != nil {
		return err
	}
	ok, err := s.d.ApprovalNotifyUpdate(ctx, p)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("record approval notification %s: %w", p.ID, err)
	}
	return nil
}
