package wire

import "time"

// ApprovalView is an approval as the API shows it: a call of a run's turn
// that needs a person's yes, and where it stands.
type ApprovalView struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id,omitempty"`
	Turn      int    `json:"turn"`
	// CallIndex counts the turn's host calls from 0: the call the
	// approval is for when the turn runs again.
	CallIndex int    `json:"call_index"`
	Primitive string `json:"primitive"`
	Method    string `json:"method,omitempty"`
	URL       string `json:"url,omitempty"`
	// Preview is the start of what the call sends (body, prompt or
	// message), cut and redacted.
	Preview string `json:"preview,omitempty"`
	// RequestDigest is the hex SHA-256 binding the approval to the exact
	// call (method, canonical URL, body and the script's headers; or
	// what an ai or spawn call asks): a turn run again making another
	// call there asks again.
	RequestDigest string `json:"request_digest,omitempty"`
	// Status is pending, approved or denied; Reason says why (an expired
	// approval is denied with reason "expired").
	Status    string     `json:"status"`
	Reason    string     `json:"reason,omitempty"`
	Scope     string     `json:"scope"`
	DecidedBy string     `json:"decided_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
	// Notify is the notification to the agent's approval_callback_url,
	// when it has one: pending, delivered or failed.
	Notify string `json:"notify,omitempty"`
}

// ApprovalList is a page of GET /v1/approvals.
type ApprovalList struct {
	Approvals  []ApprovalView `json:"approvals"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// ApprovalDecision is the body of POST /v1/approvals/{id}/approve and
// /deny (it may be empty). Scope "session" (approve only) lets the same
// call (primitive, method, URL) through for the rest of the run's
// session; a run without a session is 422.
type ApprovalDecision struct {
	Reason string `json:"reason,omitempty"`
	Scope  string `json:"scope,omitempty"`
}
