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

// An agent's egress opens the private-address block for its own turns
// only, at connect time like the block itself: a turn of an agent
// without it is refused, also on the connection another agent's turn
// left open, and DenyPrivate closes it again.
func TestAgentEgress(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "internal")
	}))
	t.Cleanup(srv.Close)
	script := `function run(a) { return fetch(a.url).body }`
	args := []byte(fmt.Sprintf(`{"url": %q}`, srv.URL))
	as := func(p *Pool, egress ...string) agentfleet.ExecResult {
		return execute(t, p, agentfleet.ExecRequest{Script: script, Args: args, Egress: egress})
	}

	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Resolver: fakeResolver{"svc.internal": addrs("127.0.0.1")}}})
	require.Contains(t, failed(t, as(p), agentfleet.ScriptDenied), "127.0.0.1 is a loopback address")
	require.Equal(t, `"internal"`, ok(t, as(p, "127.0.0.1")))
	require.Equal(t, `"internal"`, ok(t, as(p, "127.0.0.0/8")))
	require.Contains(t, failed(t, as(p), agentfleet.ScriptDenied), "loopback", "the allowed agent's connection is not shared")
	require.Contains(t, failed(t, as(p, "10.0.0.0/8"), agentfleet.ScriptDenied), "loopback", "another range opens nothing here")
	require.EqualValues(t, 2, hits.Load())

	// A host name is allowed whatever it resolves to.
	byName := []byte(fmt.Sprintf(`{"url": "http://svc.internal:%d/"}`, srv.Listener.Addr().(*net.TCPAddr).Port))
	res := execute(t, p, agentfleet.ExecRequest{Script: script, Args: byName, Egress: []string{"svc.internal"}})
	require.Equal(t, `"internal"`, ok(t, res))
	res = execute(t, p, agentfleet.ExecRequest{Script: script, Args: byName, Egress: []string{"other.internal"}})
	require.Contains(t, failed(t, res, agentfleet.ScriptDenied), "loopback")
	// A metadata range never opens, whatever the agent says.
	require.Contains(t, failed(t, as(p, "169.254.0.0/16"), agentfleet.ScriptDenied), "metadata")

	deny := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{DenyPrivate: true, Allow: loopback}})
	require.Contains(t, failed(t, as(deny, "127.0.0.1"), agentfleet.ScriptDenied), "loopback", "DenyPrivate overrides both")
	require.Contains(t, failed(t, as(deny), agentfleet.ScriptDenied), "loopback")
	require.EqualValues(t, 3, hits.Load())
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
