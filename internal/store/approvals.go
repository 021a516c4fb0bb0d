package store

import (
	"time"

	"github.com/agentfleet/agentfleet"
)

// ApprovalStatus is where an approval stands.
type ApprovalStatus = agentfleet.ApprovalState

const (
	ApprovalPending  = agentfleet.ApprovalPending
	ApprovalApproved = agentfleet.ApprovalApproved
	ApprovalDenied   = agentfleet.ApprovalDenied
)

// ApprovalScope is what an approval covers: its one call (to its
// digest), or calls of the same method and URL (and primitive, fetch
// and http being one) for the rest of the run's session.
type ApprovalScope string

const (
	ApprovalScopeCall    ApprovalScope = "call"
	ApprovalScopeSession ApprovalScope = "session"
)

// Reasons and decider of the approvals the store denies itself.
const (
	ApprovalExpired  = "expired"
	ApprovalRunEnded = "run ended"
	ApprovalBySystem = "system"
)

// Approval is one call of a run's turn that needs a person's yes.
type Approval struct {
	ID        string
	Tenant    string
	RunID     string
	SessionID string
	Turn      int
	agentfleet.ApprovalCall
	Status    ApprovalStatus
	Reason    string
	Scope     ApprovalScope
	DecidedBy string
	CreatedAt time.Time
	DecidedAt time.Time // zero while pending
	ExpiresAt time.Time
	// Notify* is the approval's notification to the agent's
	// approval_callback_url; NotifyState is empty when there is none.
	NotifyURL      string
	NotifyState    CallbackState
	NotifyAttempts int
	NotifyNextAt   time.Time
	NotifyError    string
}

// ApprovalRequestParams parks run RunID, at turn Turn (not committed
// yet), on Call. Timeout is how long the approval waits (zero:
// agentfleet.ApprovalTimeoutDefault); NotifyURL, when set, is notified.
type ApprovalRequestParams struct {
	RunID     string
	Turn      int
	Call      agentfleet.ApprovalCall
	Timeout   time.Duration
	NotifyURL string
	Now       time.Time
}

type ApprovalRequestResult struct {
	Approval Approval
	// Parked: the run waits for Approval; Change has its event. Else the
	// approval was decided already and Change.Run is the run, running,
	// whose turn is due again.
	Parked bool
	Change RunChangeResult
}

type ApprovalGetForCallParams struct {
	RunID     string
	SessionID string
	Tenant    string
	Turn      int
	Call      agentfleet.ApprovalCall
}

type ApprovalGetByIDParams struct {
	ID     string
	Tenant string
}

// ApprovalListParams filters and pages approvals, newest first. An empty
// Tenant lists every tenant's (the admin).
type ApprovalListParams struct {
	Tenant string
	Status ApprovalStatus
	RunID  string
	Limit  int // zero: 50
	Cursor string
}

type ApprovalListResult struct {
	Approvals  []Approval
	NextCursor string // empty on the last page
}

// ApprovalDecideParams decides approval ID; a non-empty Tenant scopes
// the lookup. Scope empty is ApprovalScopeCall.
type ApprovalDecideParams struct {
	ID        string
	Tenant    string
	Approve   bool
	Reason    string
	DecidedBy string
	Scope     ApprovalScope
	Now       time.Time
}

type ApprovalDecideResult struct {
	Approval Approval
	// Change is the run after the decision, with its event.
	Change RunChangeResult
	// Woken: the run waited for this approval and resumes; its next
	// turn is due.
	Woken bool
}

type ApprovalExpireParams struct {
	Now   time.Time
	Limit int // zero: 100
}

type ApprovalNotifyClaimParams struct {
	Now   time.Time
	Limit int
	Lease time.Duration
}

// ApprovalNotifyRecordParams records a notification attempt: State
// delivered or failed ends it; pending tries again at NextAt.
type ApprovalNotifyRecordParams struct {
	ID     string
	State  CallbackState
	NextAt time.Time
	Error  string
}
