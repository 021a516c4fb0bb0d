package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentfleet/agentfleet/wire"
)

// Sessions are a tenant's: with its API key tenant is "" (or the key's
// own tenant); with the admin token tenant names it.

// ListSessionsParams pages GET /v1/sessions.
type ListSessionsParams struct {
	Tenant string
	// Agent keeps the sessions whose latest run is this agent's.
	Agent  string
	Limit  int
	Cursor string
}

// ListSessions lists a tenant's sessions, newest updated first.
func (c *Client) ListSessions(ctx context.Context, p ListSessionsParams) (wire.SessionList, error) {
	q := pageQuery(p.Limit, p.Cursor)
	if p.Tenant != "" {
		q.Set("tenant", p.Tenant)
	}
	if p.Agent != "" {
		q.Set("agent", p.Agent)
	}
	var out wire.SessionList
	err := c.do(ctx, http.MethodGet, "/v1/sessions?"+q.Encode(), nil, &out)
	return out, err
}

// GetSession reads a session with its runs, oldest first, and its
// latest checkpoint.
func (c *Client) GetSession(ctx context.Context, tenant, id string) (wire.SessionView, error) {
	var out wire.SessionView
	err := c.do(ctx, http.MethodGet, sessionPath(tenant, id), nil, &out)
	return out, err
}

// DeleteSession deletes a session's runs, all of which must have ended
// (else an *Error with status 409), and says how many went.
func (c *Client) DeleteSession(ctx context.Context, tenant, id string) (wire.SessionDeleted, error) {
	var out wire.SessionDeleted
	err := c.do(ctx, http.MethodDelete, sessionPath(tenant, id), nil, &out)
	return out, err
}

func sessionPath(tenant, id string) string {
	p := "/v1/sessions/" + url.PathEscape(id)
	if tenant != "" {
		p += "?tenant=" + url.QueryEscape(tenant)
	}
	return p
}
