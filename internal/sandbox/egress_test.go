package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// An agent's egress opens private ranges only, never loopback or
// metadata: a loopback entry opens nothing (an agent stored before the
// API refused one), an entry naming localhost, or a name that resolves
// to loopback or metadata, is refused by the guard, at connect time for
// the resolved names. The operator's allow is what opens loopback, for
// every agent, and DenyPrivate closes it again.
func TestAgentEgress(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "internal")
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	script := `function run(a) { return fetch(a.url).body }`
	get := func(p *Pool, url string, egress ...string) agentfleet.ExecResult {
		return execute(t, p, agentfleet.ExecRequest{Script: script, Args: []byte(fmt.Sprintf(`{"url": %q}`, url)), Egress: egress})
	}
	byName := func(host string) string { return fmt.Sprintf("http://%s:%d/", host, port) }

	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Resolver: fakeResolver{
		"svc.internal": addrs("127.0.0.1"), "meta.internal": addrs("169.254.169.254"), "gcp6.internal": addrs("fd20:ce::254"),
	}}})
	require.Contains(t, failed(t, get(p, srv.URL), agentfleet.ScriptDenied), "127.0.0.1 is a loopback address")
	for _, egress := range [][]string{{"127.0.0.1"}, {"127.0.0.0/8"}, {"0.0.0.0/0"}, {"10.0.0.0/8"}} {
		require.Contains(t, failed(t, get(p, srv.URL, egress...), agentfleet.ScriptDenied), "127.0.0.1 is a loopback address", egress)
	}
	msg := failed(t, get(p, byName("localhost"), "localhost"), agentfleet.ScriptDenied)
	require.Contains(t, msg, "blocked by the network guard: localhost names the local machine")
	msg = failed(t, get(p, byName("svc.internal"), "svc.internal"), agentfleet.ScriptDenied)
	require.Contains(t, msg, "127.0.0.1 is a loopback address (svc.internal resolves to it)")
	msg = failed(t, get(p, byName("meta.internal"), "meta.internal", "169.254.0.0/16"), agentfleet.ScriptDenied)
	require.Contains(t, msg, "169.254.169.254 is a cloud metadata address")
	msg = failed(t, get(p, byName("gcp6.internal"), "*.internal"), agentfleet.ScriptDenied)
	require.Contains(t, msg, "fd20:ce::254 is a cloud metadata address")
	require.Zero(t, hits.Load(), "no agent's entry opened loopback")

	ops := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	require.Equal(t, `"internal"`, ok(t, get(ops, srv.URL)))
	require.Equal(t, `"internal"`, ok(t, get(ops, srv.URL, "10.0.0.0/8")), "an agent's list adds to the operator's")
	require.EqualValues(t, 2, hits.Load())

	deny := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{DenyPrivate: true, Allow: loopback}})
	require.Contains(t, failed(t, get(deny, srv.URL, "10.0.0.0/8"), agentfleet.ScriptDenied), "loopback", "DenyPrivate overrides both")
	require.Contains(t, failed(t, get(deny, srv.URL), agentfleet.ScriptDenied), "loopback")
	require.EqualValues(t, 2, hits.Load())
}

// An agent's turn_timeout shortens the pool's wall-clock limit of its
// turns, and the error names it; a longer one changes nothing.
func TestAgentTurnTimeout(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 20 * time.Second, TurnTimeout: 30 * time.Second}})
	start := time.Now()
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { while (true) {} }`, TurnTimeout: 300 * time.Millisecond})
	require.Contains(t, failed(t, res, agentfleet.ScriptTimeout), "wall-clock time limit of 300ms (its agent's turn_timeout)")
	require.Less(t, time.Since(start), 10*time.Second)
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { return 1 }`, TurnTimeout: time.Hour})
	require.Equal(t, "1", ok(t, res))
}
