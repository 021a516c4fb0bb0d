package sandbox

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// fetchScript returns the body of args.url.
const fetchScript = `function run(args) { return fetch(args.url).body; }`

// gateServer answers "together" once want requests are in flight at
// once, and "alone" to requests that waited `patience` without that. It
// records the most requests it saw in flight.
type gateServer struct {
	*httptest.Server
	mu       sync.Mutex
	inflight int
	most     int
	all      chan struct{}
}

func newGateServer(t *testing.T, want int, patience time.Duration) *gateServer {
	t.Helper()
	g := &gateServer{all: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.inflight++
		g.most = max(g.most, g.inflight)
		if g.inflight == want {
			close(g.all)
		}
		g.mu.Unlock()
		defer func() { g.mu.Lock(); g.inflight--; g.mu.Unlock() }()
		select {
		case <-g.all:
			_, _ = w.Write([]byte("together"))
		case <-time.After(patience):
			_, _ = w.Write([]byte("alone"))
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *gateServer) mostInFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most
}

// executeAll runs n copies of script with args at once and returns their
// results; an infrastructure error fails the test.
func executeAll(t *testing.T, p *Pool, n int, script, args string) []agentfleet.ExecResult {
	t.Helper()
	res := make([]agentfleet.ExecResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = p.Execute(context.Background(), agentfleet.ExecRequest{
				Tenant: "tenant-1", Script: script, Args: []byte(args),
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return res
}

func urlArgs(url string) string {
	b, _ := json.Marshal(map[string]string{"url": url})
	return string(b)
}

// Turns waiting on host calls overlap beyond PoolSize, each in its own
// process, and the processes beyond PoolSize are stopped once idle.
func TestHostCallsOverlapBeyondPoolSize(t *testing.T) {
	t.Parallel()
	srv := newGateServer(t, 3, 10*time.Second)
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 3, IdleTimeout: 200 * time.Millisecond, Network: NetworkConfig{Allow: loopback}})

	for _, res := range executeAll(t, p, 3, fetchScript, urlArgs(srv.URL)) {
		require.Equal(t, `"together"`, ok(t, res), "all three fetches were in flight at once")
	}
	live, idle := p.Processes()
	require.Equal(t, 3, live)
	require.Equal(t, 3, idle)
	require.Eventually(t, func() bool {
		live, idle := p.Processes()
		return live == 1 && idle == 1
	}, 5*time.Second, 20*time.Millisecond, "idle processes beyond PoolSize are stopped after IdleTimeout")

	// The one kept still serves.
	require.Equal(t, `2`, ok(t, run(t, p, `function run() { return 1 + 1; }`, "")))
}

// MaxProcesses caps the turns in an Execute at once; the others wait
// for a process and then run.
func TestProcessesCappedAtMaxProcesses(t *testing.T) {
	t.Parallel()
	srv := newGateServer(t, 0, 100*time.Millisecond) // never together: each waits 100ms
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 2, Network: NetworkConfig{Allow: loopback}})

	for _, res := range executeAll(t, p, 5, fetchScript, urlArgs(srv.URL)) {
		require.Equal(t, `"alone"`, ok(t, res))
	}
	require.Equal(t, 2, srv.mostInFlight())
	live, _ := p.Processes()
	require.LessOrEqual(t, live, 2)
}

// Scripts that make no host call run PoolSize at a time and need no more
// processes than that.
func TestScriptsWithoutHostCallsUsePoolSizeProcesses(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 4})
	spin := `function run() { const end = Date.now() + 30; let n = 0; while (Date.now() < end) n++; return n > 0; }`
	for _, res := range executeAll(t, p, 4, spin, "") {
		require.Equal(t, "true", ok(t, res))
	}
	live, _ := p.Processes()
	require.Equal(t, 1, live)
}

// A turn whose host call returned while others hold every compute place
// can still be cancelled: it does not wait for a place to stop.
func TestCancelWhileWaitingToComputeAfterHostCall(t *testing.T) {
	t.Parallel()
	srv := newGateServer(t, 0, 50*time.Millisecond)
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 2, Network: NetworkConfig{Allow: loopback}})

	// The spinner takes the one compute place while the fetcher waits on
	// its host call, and keeps it for up to 3s.
	spinning := make(chan struct{})
	spinDone := make(chan agentfleet.ExecResult, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fetchDone := make(chan agentfleet.ExecResult, 1)
	go func() {
		res, _ := p.Execute(ctx, agentfleet.ExecRequest{Tenant: "tenant-1", Script: `function run(args) {
  const first = fetch(args.url).body;
  return first;
}`, Args: []byte(urlArgs(srv.URL))})
		fetchDone <- res
	}()
	// Wait until the fetch is in flight, then start the spinner.
	require.Eventually(t, func() bool { return srv.mostInFlight() == 1 }, 5*time.Second, time.Millisecond)
	go func() {
		close(spinning)
		res, _ := p.Execute(context.Background(), agentfleet.ExecRequest{Tenant: "tenant-1",
			Script: `function run() { const end = Date.now() + 3000; while (Date.now() < end) {} return "spun"; }`})
		spinDone <- res
	}()
	<-spinning
	time.Sleep(200 * time.Millisecond) // the fetch returned; the spinner computes
	start := time.Now()
	cancel()
	select {
	case res := <-fetchDone:
		require.Less(t, time.Since(start), 2*time.Second)
		if res.Err != nil {
			require.Equal(t, agentfleet.ScriptCancelled, res.Err.Kind, res.Err.Message)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the cancelled turn waited for the spinner's compute place")
	}
	require.Equal(t, `"spun"`, ok(t, <-spinDone))
}
