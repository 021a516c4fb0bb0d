package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// ApprovalExecutor reads and writes approvals. Parking a run on an
// approval and deciding one run inside a transaction and lock the run
// first (RunLock), then the approval.
type ApprovalExecutor interface {
	// ApprovalLock reads approval id and holds it; store.ErrNotFound
	// when there is none.
	ApprovalLock(ctx context.Context, id string) (store.Approval, error)
	// ApprovalLockAt is ApprovalLock of the approval of a call: at its
	// index, of its digest.
	ApprovalLockAt(ctx context.Context, runID string, turn, index int, digest string) (store.Approval, error)
	// ApprovalGet reads approval id without holding it.
	ApprovalGet(ctx context.Context, id string) (store.Approval, error)
	// ApprovalGetForCall reads the call's own approval (at its index, of
	// its digest), else an approved grant of p's session for the same
	// method and URL (fetch and http alike); none is store.ErrNotFound.
	ApprovalGetForCall(ctx context.Context, p store.ApprovalGetForCallParams) (store.Approval, error)
	// ApprovalList reads up to Limit approvals newest first, filtered by
	// the set fields, below position AfterSeq when it is not zero.
	ApprovalList(ctx context.Context, p ApprovalListParams) ([]ApprovalRow, error)
	// ApprovalListDue lists up to limit pending approvals that expired by
	// now or whose run ended, soonest expiry first.
	ApprovalListDue(ctx context.Context, now time.Time, limit int) ([]ApprovalDue, error)
	// ApprovalCountPending counts pending approvals by tenant (Key).
	ApprovalCountPending(ctx context.Context) ([]Count, error)
	// ApprovalNotifyClaim moves up to limit pending notifications due by
	// now to be due again at until, skipping rows another claim holds.
	ApprovalNotifyClaim(ctx context.Context, now, until time.Time, limit int) ([]store.Approval, error)
	// ApprovalNotifyUpdate records a notification attempt (state, one
	// more attempt, next time, error) and reports whether there was the
	// approval.
	ApprovalNotifyUpdate(ctx context.Context, p store.ApprovalNotifyRecordParams) (bool, error)
	ApprovalInsert(ctx context.Context, a store.Approval) error
	// ApprovalUpdate writes a decision: status, reason, scope, session
	// id, decided by, decided at.
	ApprovalUpdate(ctx context.Context, a store.Approval) error
}

// ApprovalListParams are ApprovalList's; empty fields do not filter.
type ApprovalListParams struct {
	Tenant   string
	Status   store.ApprovalStatus
	RunID    string
	AfterSeq int64
	Limit    int
}

// ApprovalRow is an approval and its list position.
type ApprovalRow struct {
	store.Approval
	Seq int64
}

// ApprovalDue is a pending approval to expire; RunEnded says its run
// ended (rather than its time ran out).
type ApprovalDue struct {
	ID       string
	RunEnded bool
}

// Count is how many rows share Key.
type Count struct {
	Key string
	N   int
}
