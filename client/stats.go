package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentfleet/agentfleet/wire"
)

// TenantStats reads tenant's tokens settled and runs ended per hour over
// the last hours (0: a week), oldest hour first.
func (c *Client) TenantStats(ctx context.Context, tenant string, hours int) (wire.TenantStats, error) {
	path := "/v1/tenants/" + url.PathEscape(tenant) + "/stats"
	if hours > 0 {
		path += "?hours=" + strconv.Itoa(hours)
	}
	var out wire.TenantStats
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// BatchStats reads a batch's progress: its runs ended over its life, in
// about 120 buckets.
func (c *Client) BatchStats(ctx context.Context, id string) (wire.BatchStats, error) {
	var out wire.BatchStats
	err := c.do(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(id)+"/stats", nil, &out)
	return out, err
}

// FleetStats reads the fleet's slots and queue depth over the last hour,
// as the dispatcher sampled them (the admin token).
func (c *Client) FleetStats(ctx context.Context) (wire.FleetStats, error) {
	var out wire.FleetStats
	err := c.do(ctx, http.MethodGet, "/v1/fleet/stats", nil, &out)
	return out, err
}
