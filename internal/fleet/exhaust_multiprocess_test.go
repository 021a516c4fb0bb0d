package fleet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// TestMultiProcessWorkerAtFileLimitFailsNoRun starts a worker process with
// `ulimit -n 1024` and 2,000 slots, and more runs in flight at once than
// its descriptors can hold connections to the model for. The worker caps
// its slots to its descriptors at start (with a warning), hands back any
// turn it fails for want of them without counting it, and fails no run.
func TestMultiProcessWorkerAtFileLimitFailsNoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries and takes ~45s")
	}
	const (
		fdLimit = 1024
		runs    = 1300 // more than fdLimit turns at once, were the slots all used
		// hold: the model holds its replies until runs calls are in
		// flight or this long, more than the retries of a turn take
		// to dead-letter it (MaxDeliver 5).
		hold = 30 * time.Second
	)
	baseURL, schema := pgtest.Schema(t)
	dispatcherBin, workerBin := buildFleet(t)
	natsBin := bustest.BuildServerBinary(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: baseURL, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	natsSrv := bustest.StartServerProcess(t, natsBin, freePort(t), t.TempDir())

	var inFlight, peak atomic.Int64
	released := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(released) }) }
	t.Cleanup(release)
	var firstCall sync.Once
	model, err := fakeserver.Start(fakeserver.Config{Responder: func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		firstCall.Do(func() { time.AfterFunc(hold, release) })
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n >= runs {
			release()
		}
		<-released
		return "Done.\n```javascript\nfunction run(args) { answer('ok') }\n```", agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, nil
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })

	// The limit is the shell's, soft and hard: the worker cannot raise it.
	wrapper := filepath.Join(t.TempDir(), "worker-ulimit")
	require.NoError(t, os.WriteFile(wrapper, fmt.Appendf(nil, "#!/bin/sh\nulimit -n %d || exit 97\nexec %q\n", fdLimit, workerBin), 0o755))

	apiPort := freePort(t)
	common := []string{
		"AGENTFLEET_NATS_URL=" + natsSrv.URL,
		"AGENTFLEET_DATABASE_URL=" + withQuery(t, baseURL, "search_path", schema),
		"AGENTFLEET_DATA_DIR=" + t.TempDir(),
	}
	startProc(t, "dispatcher", dispatcherBin, append(common,
		fmt.Sprintf("AGENTFLEET_LISTEN=127.0.0.1:%d", apiPort), "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN=admin-secret"))
	worker := startProc(t, "worker", wrapper, append(common,
		"AGENTFLEET_WORKER_SLOTS=2000", "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0",
		"AGENTFLEET_MODEL=fake-model", "OPENAI_BASE_URL="+model.URL()))

	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	waitDispatcherReady(t, apiURL)
	tv, err := apiClient(t, apiURL, "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	tenant := apiClient(t, apiURL, tv.APIKey)
	ids := make([]string, runs)
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < runs; i += 16 {
				run, err := tenant.CreateRun(ctx, wire.RunCreateRequest{Message: fmt.Sprintf("task %d", i)})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = run.ID
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, id := range ids {
		run, err := tenant.Wait(waitCtx, id)
		if err != nil {
			c, _ := st.RunCountByStatus(ctx, "acme")
			t.Fatalf("run %d did not finish: %v; runs by status: %v", i, err, c)
		}
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d failed: %s", i, run.Error)
	}
	c, err := st.RunCountByStatus(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, map[agentfleet.RunStatus]int{agentfleet.StatusCompleted: runs}, nonZero(c))

	log, err := os.ReadFile(worker.log)
	require.NoError(t, err)
	require.Contains(t, string(log), "not enough file descriptors for the worker slots", "the worker warns that it capped its slots")
	require.Regexp(t, fmt.Sprintf(`fd_limit"?[=:]%d\b`, fdLimit), string(log), "the worker ran under the limit")
	t.Logf("%d runs completed; at most %d model calls in flight; %d turns handed back for exhaustion",
		runs, peak.Load(), strings.Count(string(log), "worker out of resources"))
}

func nonZero(c map[agentfleet.RunStatus]int) map[agentfleet.RunStatus]int {
	out := map[agentfleet.RunStatus]int{}
	for k, v := range c {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// outOfDescriptors fails the first n model calls as a worker out of file
// descriptors would see them (its dial refused with EMFILE), then calls
// the model.
type outOfDescriptors struct {
	llm.Client
	left atomic.Int64
}

func (m *outOfDescriptors) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	if m.left.Add(-1) >= 0 {
		return agentfleet.ModelResponse{}, fmt.Errorf("chat completion: %w",
			&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)})
	}
	return m.Client.Complete(ctx, req)
}

// Stream fails the same way: a turn's model call streams.
func (m *outOfDescriptors) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if m.left.Add(-1) >= 0 {
		return agentfleet.ModelResponse{}, fmt.Errorf("chat completion: %w",
			&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)})
	}
	return m.Client.Stream(ctx, req, fn)
}

// A turn the worker fails for want of its own file descriptors, more
// times than a turn may fail, is handed back each time uncounted: the
// run completes, nothing is dead-lettered.
func TestFleetWorkerOutOfDescriptorsFailsNoRun(t *testing.T) {
	t.Parallel()
	const failures = 7 // beyond MaxDeliver (5)
	var wrapped *outOfDescriptors
	f := setupFleetWith(t, fleetOptions{responder: threeTurns, workers: 1, model: func(c llm.Client) llm.Client {
		wrapped = &outOfDescriptors{Client: c}
		wrapped.left.Store(failures)
		return wrapped
	}})
	f.requireCompletes("compute 4", `"result 9"`)
	require.Equal(t, failures, f.metric(0, "agentfleet_worker_turn_messages_total", "result", "shed"))
	dead, err := f.bus.DeadLetters(f.ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, dead)
}
