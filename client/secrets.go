package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// Secrets are a tenant's: with its API key (admin scope) tenant is ""
// (or the key's own tenant); with the admin token tenant names it.

// PutSecret creates the secret name or replaces it whole, its value
// included. The answer never carries the value.
func (c *Client) PutSecret(ctx context.Context, tenant, name string, req wire.SecretRequest) (agentfleet.Secret, error) {
	var out agentfleet.Secret
	err := c.do(ctx, http.MethodPut, secretPath(tenant, name), req, &out)
	return out, err
}

// GetSecret reads a secret without its value.
func (c *Client) GetSecret(ctx context.Context, tenant, name string) (agentfleet.Secret, error) {
	var out agentfleet.Secret
	err := c.do(ctx, http.MethodGet, secretPath(tenant, name), nil, &out)
	return out, err
}

// ListSecretsParams pages GET /v1/secrets.
type ListSecretsParams struct {
	Tenant string
	Limit  int
	Cursor string
}

// ListSecrets lists a tenant's secrets by name, without their values.
func (c *Client) ListSecrets(ctx context.Context, p ListSecretsParams) (wire.SecretList, error) {
	q := pageQuery(p.Limit, p.Cursor)
	if p.Tenant != "" {
		q.Set("tenant", p.Tenant)
	}
	var out wire.SecretList
	err := c.do(ctx, http.MethodGet, "/v1/secrets?"+q.Encode(), nil, &out)
	return out, err
}

// DeleteSecret deletes a secret.
func (c *Client) DeleteSecret(ctx context.Context, tenant, name string) error {
	return c.do(ctx, http.MethodDelete, secretPath(tenant, name), nil, nil)
}

// RekeySecrets (admin token) seals every value the fleet keeps again
// under the dispatcher's current AGENTFLEET_SECRETS_KEY and says what
// it did; values no key opens are listed in the report and left.
func (c *Client) RekeySecrets(ctx context.Context) (wire.RekeyReport, error) {
	var out wire.RekeyReport
	err := c.do(ctx, http.MethodPost, "/v1/secrets/rekey", nil, &out)
	return out, err
}

func secretPath(tenant, name string) string {
	p := "/v1/secrets/" + url.PathEscape(name)
	if tenant != "" {
		p += "?tenant=" + url.QueryEscape(tenant)
	}
	return p
}
