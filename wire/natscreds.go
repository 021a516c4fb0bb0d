package wire

import "time"

// NATSCredsRevocation answers DELETE /v1/tenants/{id}/nats-creds: every
// NATS credential issued to Tenant up to RevokedBefore (inclusive, to the
// second) is refused from now on, live connections included, and the
// consumers made with them are gone.
type NATSCredsRevocation struct {
	Tenant        string    `json:"tenant"`
	RevokedBefore time.Time `json:"revoked_before"`
}
