package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/agentfleet/agentfleet/wire"
)

// natsCredsMax bounds a creds file read from the API (a few KiB).
const natsCredsMax = 1 << 20

// NATSCreds issues a NATS .creds file (admin) for a subscriber of tenant:
// it may read the tenant's events and batch events, live and replayed
// through an ordered consumer made through the API prefix
// <prefix>.js.<tenant> (nats.go jetstream.NewWithAPIPrefix) on a
// connection with the inbox prefix _INBOX_<tenant>, and nothing else.
// ttl zero means the server's default (24h).
func (c *Client) NATSCreds(ctx context.Context, tenant string, ttl time.Duration) ([]byte, error) {
	path := "/v1/tenants/" + url.PathEscape(tenant) + "/nats-creds"
	if ttl > 0 {
		path += "?ttl=" + url.QueryEscape(ttl.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, decodeError(resp)
	}
	creds, err := io.ReadAll(io.LimitReader(resp.Body, natsCredsMax))
	if err != nil {
		return nil, fmt.Errorf("read GET %s response: %w", path, err)
	}
	return creds, nil
}

// RevokeNATSCreds revokes (admin) every NATS creds issued to tenant so
// far; the servers close connections made with them, and the consumers
// made with them are deleted.
func (c *Client) RevokeNATSCreds(ctx context.Context, tenant string) (wire.NATSCredsRevocation, error) {
	var out wire.NATSCredsRevocation
	err := c.do(ctx, http.MethodDelete, "/v1/tenants/"+url.PathEscape(tenant)+"/nats-creds", nil, &out)
	return out, err
}
