package api_test

import (
	"net/http"
	"testing"
)

// Without AGENTFLEET_NATS_SIGNING_KEY the endpoints say what is missing;
// a bad ttl is refused before anything else, naming the parameter; only
// the admin may issue or revoke. (Issuing and revoking against NATS
// servers are internal/fleet's natsauth tests.)
func TestNATSCredsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	for _, method := range []string{"GET", "DELETE"} {
		requireError(t, e.do(method, "/v1/tenants/acme/nats-creds", adminToken, nil), http.StatusServiceUnavailable, "nats_auth_missing", "AGENTFLEET_NATS_SIGNING_KEY")
		requireError(t, e.do(method, "/v1/tenants/acme/nats-creds", key, nil), http.StatusForbidden, "forbidden", "admin")
	}
	for _, ttl := range []string{"soon", "0s", "-1h", "500ms", "9000h"} {
		requireError(t, e.do("GET", "/v1/tenants/acme/nats-creds?ttl="+ttl, adminToken, nil), http.StatusBadRequest, "bad_request", "ttl")
	}
}
