package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentfleet/agentfleet/wire"
)

// ListApprovalsParams filters and pages GET /v1/approvals. Tenant is for
// the admin token (empty: every tenant's); a tenant key sees its own.
type ListApprovalsParams struct {
	Status string // pending, approved, denied; empty: all
	RunID  string
	Tenant string
	Limit  int
	Cursor string
}

// ListApprovals lists approvals, newest first.
func (c *Client) ListApprovals(ctx context.Context, p ListApprovalsParams) (wire.ApprovalList, error) {
	q := pageQuery(p.Limit, p.Cursor)
	for k, v := range map[string]string{"status": p.Status, "run_id": p.RunID, "tenant": p.Tenant} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out wire.ApprovalList
	err := c.do(ctx, http.MethodGet, "/v1/approvals?"+q.Encode(), nil, &out)
	return out, err
}

// GetApproval reads one approval.
func (c *Client) GetApproval(ctx context.Context, id string) (wire.ApprovalView, error) {
	var out wire.ApprovalView
	err := c.do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Approve approves a pending approval: the run resumes and the call
// proceeds. Scope "session" grants the same call for the rest of the
// run's session.
func (c *Client) Approve(ctx context.Context, id string, d wire.ApprovalDecision) (wire.ApprovalView, error) {
	var out wire.ApprovalView
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/approve", d, &out)
	return out, err
}

// Deny denies a pending approval: the run resumes and the call throws a
// catchable error with the reason.
func (c *Client) Deny(ctx context.Context, id string, d wire.ApprovalDecision) (wire.ApprovalView, error) {
	var out wire.ApprovalView
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/deny", d, &out)
	return out, err
}
