package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// PutAgent defines the tenant's agent name, or replaces it whole (a new
// version when anything changed).
func (c *Client) PutAgent(ctx context.Context, name string, req wire.AgentRequest) (agentfleet.Agent, error) {
	var out agentfleet.Agent
	err := c.do(ctx, http.MethodPut, "/v1/agents/"+url.PathEscape(name), req, &out)
	return out, err
}

// PutAgentJSON is PutAgent with the body as the caller has it (a file's
// JSON), so that the server, not a decoding here, names a field it does
// not know.
func (c *Client) PutAgentJSON(ctx context.Context, name string, body json.RawMessage) (agentfleet.Agent, error) {
	var out agentfleet.Agent
	err := c.do(ctx, http.MethodPut, "/v1/agents/"+url.PathEscape(name), body, &out)
	return out, err
}

// GetAgent returns the agent's current version, or with version > 0 that
// version (kept for the runs admitted under it after a replacement or
// delete).
func (c *Client) GetAgent(ctx context.Context, name string, version int) (agentfleet.Agent, error) {
	path := "/v1/agents/" + url.PathEscape(name)
	if version > 0 {
		path += "?version=" + strconv.Itoa(version)
	}
	var out agentfleet.Agent
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// ListAgents lists the tenant's agents, newest first.
func (c *Client) ListAgents(ctx context.Context, limit int, cursor string) (wire.AgentList, error) {
	var out wire.AgentList
	err := c.do(ctx, http.MethodGet, "/v1/agents?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// DeleteAgent deletes an agent; runs admitted under it finish with it.
func (c *Client) DeleteAgent(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/agents/"+url.PathEscape(name), nil, nil)
}
