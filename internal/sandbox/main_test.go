package sandbox

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
)

// The test binary doubles as the sandbox process: when a pool starts it
// with the child marker, the package's init serves and exits before
// TestMain ever runs.
func TestMain(m *testing.M) {
	code := m.Run()
	closeShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var shared struct {
	once sync.Once
	pool *Pool
	err  error
}

// sharedPool is a default-config pool shared by the tests that need
// nothing special, so they do not each pay for starting processes. It
// is closed in TestMain.
func sharedPool(t *testing.T) *Pool {
	t.Helper()
	shared.once.Do(func() { shared.pool, shared.err = New(Config{PoolSize: 4}) })
	if shared.err != nil {
		t.Fatalf("New: %v", shared.err)
	}
	return shared.pool
}

func closeShared() {
	if shared.pool != nil {
		shared.pool.Close()
	}
}

// newPool is a pool of its own, closed when the test ends.
func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// execute runs a request with args on p and fails the test on an
// infrastructure error.
func execute(t *testing.T, p *Pool, req agentfleet.ExecRequest) agentfleet.ExecResult {
	t.Helper()
	if req.Tenant == "" {
		req.Tenant = "tenant-1"
	}
	if req.RunID == "" {
		req.RunID = "run-1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.Execute(ctx, req)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

func run(t *testing.T, p *Pool, script string, args string) agentfleet.ExecResult {
	t.Helper()
	var a []byte
	if args != "" {
		a = []byte(args)
	}
	return execute(t, p, agentfleet.ExecRequest{Script: script, Args: a})
}

// ok asserts a successful run and returns its Return as a string.
func ok(t *testing.T, res agentfleet.ExecResult) string {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("script failed: %v\nlogs:\n%s", res.Err, res.Logs)
	}
	return string(res.Return)
}

// failed asserts a failure of kind and returns its message.
func failed(t *testing.T, res agentfleet.ExecResult, kind agentfleet.ScriptErrorKind) string {
	t.Helper()
	if res.Err == nil {
		t.Fatalf("script succeeded (return %s, logs %q), want a %s error", res.Return, res.Logs, kind)
	}
	if res.Err.Kind != kind {
		t.Fatalf("error kind %s (%q), want %s", res.Err.Kind, res.Err.Message, kind)
	}
	return res.Err.Message
}

// onlyChildPid is the pid of p's one sandbox process.
func onlyChildPid(t *testing.T, p *Pool) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.live) != 1 {
		t.Fatalf("%d sandbox processes, want 1", len(p.live))
	}
	for c := range p.live {
		return c.cmd.Process.Pid
	}
	return 0
}
