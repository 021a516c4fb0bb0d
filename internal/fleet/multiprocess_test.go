package fleet_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

var fleetBinaries struct {
	once sync.Once
	dir  string
	err  error
}

// buildFleet builds cmd/dispatcher and cmd/worker once per test binary.
func buildFleet(t *testing.T) (dispatcher, worker string) {
	t.Helper()
	fleetBinaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "agentfleet-bin-*")
		if err != nil {
			fleetBinaries.err = err
			return
		}
		fleetBinaries.dir = dir
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
			"github.com/agentfleet/agentfleet/cmd/dispatcher", "github.com/agentfleet/agentfleet/cmd/worker")
		if out, err := cmd.CombinedOutput(); err != nil {
			fleetBinaries.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, fleetBinaries.err)
	return filepath.Join(fleetBinaries.dir, "dispatcher"), filepath.Join(fleetBinaries.dir, "worker")
}

// proc is a fleet process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, name, bin string, env []string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestMultiProcessFleetSurvivesWorkerKillAndNATSRestart runs the fleet as
// a production deployment would: a nats-server process built from the Go
// module, PostgreSQL, one dispatcher and three worker processes. Mid-load
// one worker gets SIGKILL and the NATS server restarts; every run must
// still complete correctly, with no turn committed twice.
func TestMultiProcessFleetSurvivesWorkerKillAndNATSRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries and takes ~30s")
	}
	// A fresh schema for this fleet, migrated here and named in the URL
	// the processes get; dropped when the test ends.
	baseURL, schema := pgtest.Schema(t)
	dispatcherBin, workerBin := buildFleet(t)
	natsBin := bustest.BuildServerBinary(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: baseURL, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	dbURL := withQuery(t, baseURL, "search_path", schema)

	natsDir := t.TempDir()
	natsPort := freePort(t)
	natsSrv := bustest.StartServerProcess(t, natsBin, natsPort, natsDir)

	model, err := fakeserver.Start(fakeserver.Config{Responder: threeTurns, Latency: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })

	apiPort := freePort(t)
	common := []string{
		"AGENTFLEET_NATS_URL=" + natsSrv.URL,
		"AGENTFLEET_DATABASE_URL=" + dbURL,
		"AGENTFLEET_ACK_WAIT=3s",
		"AGENTFLEET_DRAIN_TIMEOUT=10s",
		"AGENTFLEET_DATA_DIR=" + t.TempDir(),
	}
	startProc(t, "dispatcher", dispatcherBin, append(common,
		fmt.Sprintf("AGENTFLEET_LISTEN=127.0.0.1:%d", apiPort), "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN=admin-secret"))
	var workers []*proc
	for i := range 3 {
		workers = append(workers, startProc(t, fmt.Sprintf("worker%d", i), workerBin, append(common,
			"AGENTFLEET_WORKER_SLOTS=8", "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0",
			"AGENTFLEET_MODEL=fake-model", "OPENAI_BASE_URL="+model.URL())))
	}

	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	waitDispatcherReady(t, apiURL)
	const runs = 60
	tenant, ids := submitComputeRuns(t, apiURL, runs)
	completed := func() int { return completedRuns(t, st) }
	require.Eventually(t, func() bool { return completed() >= 10 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, workers[0].cmd.Process.Signal(syscall.SIGKILL))
	<-workers[0].done

	require.Eventually(t, func() bool { return completed() >= 25 }, 60*time.Second, 10*time.Millisecond)
	natsSrv.Stop()
	natsSrv = bustest.StartServerProcess(t, natsBin, natsPort, natsDir)

	// SIGTERM drains a worker mid-load: it stops pulling, finishes or
	// hands back its turns, and exits 0; the last worker does the rest.
	require.Eventually(t, func() bool { return completed() >= 35 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, workers[1].cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-workers[1].done:
	case <-time.After(20 * time.Second):
		t.Fatal("a draining worker did not exit within its drain timeout")
	}
	require.Equal(t, 0, workers[1].cmd.ProcessState.ExitCode(), "a drained worker exits 0")

	requireComputed(t, st, tenant, ids, 90*time.Second)
	calls := map[string]int{}
	for _, r := range model.Received() {
		calls[fmt.Sprintf("%s/%d", r.FirstUser(), assistantTurns(r))]++
	}
	repeated := 0
	for _, n := range calls {
		repeated += n - 1
	}
	t.Logf("%d runs completed; %d model calls for %d turns (%d repeated: the killed worker's and the restart's interrupted calls)",
		runs, len(model.Received()), 3*runs, repeated)
}

// waitDispatcherReady waits until the dispatcher at apiURL answers /readyz.
func waitDispatcherReady(t *testing.T, apiURL string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(apiURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "dispatcher never became ready")
}

// submitComputeRuns creates tenant acme on the dispatcher at apiURL and
// submits n three-turn runs ("compute i", answered by threeTurns).
func submitComputeRuns(t *testing.T, apiURL string, n int) (*client.Client, []string) {
	t.Helper()
	ctx := context.Background()
	tv, err := apiClient(t, apiURL, "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	tenant := apiClient(t, apiURL, tv.APIKey)
	ids := make([]string, n)
	for i := range n {
		run, err := tenant.CreateRun(ctx, wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i)})
		require.NoError(t, err)
		ids[i] = run.ID
	}
	return tenant, ids
}

func completedRuns(t *testing.T, st store.Store) int {
	t.Helper()
	c, err := st.RunCountByStatus(context.Background(), "acme")
	require.NoError(t, err)
	return c[agentfleet.StatusCompleted]
}

// requireComputed waits for the runs of submitComputeRuns and checks each
// completed with its answer and committed each turn once.
func requireComputed(t *testing.T, st store.Store, tenant *client.Client, ids []string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for i, id := range ids {
		run, err := tenant.Wait(waitCtx, id)
		if err != nil {
			stuck, _ := st.RunGetByID(ctx, store.RunGetByIDParams{ID: id})
			c, _ := st.RunCountByStatus(ctx, "acme")
			t.Fatalf("run %d did not finish: %v; it is %s after %d turns; runs by status: %v", i, err, stuck.Status, stuck.Turn, c)
		}
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d: %s", i, run.Error)
		require.JSONEq(t, strconv.Quote(fmt.Sprintf("result %d", 2*i+1)), string(run.Answer))
		requireCommittedOnce(t, st, run)
	}
}

// requireCommittedOnce checks a run's trace holds each turn exactly once.
func requireCommittedOnce(t *testing.T, st store.Store, run agentfleet.Run) {
	t.Helper()
	evs, err := st.EventListByRun(context.Background(), store.EventListByRunParams{RunID: run.ID})
	require.NoError(t, err)
	calls := map[int]int{}
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq, "run %s: seq must be dense", run.ID)
		if ev.Type == agentfleet.EventModelCall {
			calls[ev.Turn]++
		}
	}
	for turn := 1; turn <= run.Turn; turn++ {
		require.Equal(t, 1, calls[turn], "run %s turn %d committed more than once", run.ID, turn)
	}
}

func withQuery(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// A worker process SIGKILLed after its parent's turn spawned children and
// before that turn committed: the turn runs again on another worker and
// spawns nothing twice (the children's ids come from the parent, the turn
// and the call), and the parent completes from its children's answers.
func TestMultiProcessSpawnSurvivesWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test builds binaries")
	}
	held, killed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		if r.FirstUser() == "hold" {
			// The first hold answers only once its worker is dead.
			once.Do(func() { close(held); <-killed })
		}
		return fanOutTurns(r)
	}
	f := startWorkerFleet(t, responder)
	ctx, st, tenant, first := f.ctx, f.st, f.tenant, f.first
	parent, err := tenant.CreateRun(ctx, wire.RunCreateRequest{Message: "fan out 2 and hold"})
	require.NoError(t, err)

	select {
	case <-held: // both children spawned, the turn not committed
	case <-time.After(60 * time.Second):
		t.Fatal("the parent's script never reached its hold")
	}
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	close(killed)
	f.startWorker("worker1")

	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done, err := tenant.Wait(waitCtx, parent.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `"completed:4,completed:9"`, string(done.Answer))
	kids, err := st.RunList(ctx, store.RunListParams{Tenant: "acme", ParentRunID: parent.ID})
	require.NoError(t, err)
	require.Len(t, kids.Runs, 2, "the turn run again spawned nothing twice")
	for _, k := range kids.Runs {
		requireCommittedOnce(t, st, k)
	}
	evs, err := st.EventListByRun(ctx, store.EventListByRunParams{RunID: parent.ID})
	require.NoError(t, err)
	calls := map[int]int{}
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq)
		if ev.Type == agentfleet.EventModelCall {
			calls[ev.Turn]++
		}
	}
	require.Equal(t, map[int]int{1: 2, 2: 1}, calls, "the parent's turns committed once: its reply and the hold's ai() call, then its answer")
}

// workerFleet is a fleet of processes for a kill test: a nats-server
// process, Postgres (a fresh schema), a dispatcher and one worker
// process, whose scripts may reach loopback (AGENTFLEET_EGRESS_ALLOW),
// driven by a fake model answering with responder; tenant is acme's.
type workerFleet struct {
	t         *testing.T
	ctx       context.Context
	st        store.Store
	model     *fakeserver.Server
	tenant    *client.Client
	first     *proc
	workerBin string
	workerEnv []string
}

func startWorkerFleet(t *testing.T, responder fakeserver.Responder) *workerFleet {
	t.Helper()
	baseURL, schema := pgtest.Schema(t)
	dispatcherBin, workerBin := buildFleet(t)
	natsBin := bustest.BuildServerBinary(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: baseURL, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	natsSrv := bustest.StartServerProcess(t, natsBin, freePort(t), t.TempDir())
	model, err := fakeserver.Start(fakeserver.Config{Responder: responder})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })

	apiPort := freePort(t)
	common := []string{
		"AGENTFLEET_NATS_URL=" + natsSrv.URL,
		"AGENTFLEET_DATABASE_URL=" + withQuery(t, baseURL, "search_path", schema),
		"AGENTFLEET_ACK_WAIT=3s",
		"AGENTFLEET_DATA_DIR=" + t.TempDir(),
	}
	startProc(t, "dispatcher", dispatcherBin, append(common,
		fmt.Sprintf("AGENTFLEET_LISTEN=127.0.0.1:%d", apiPort), "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN=admin-secret"))
	f := &workerFleet{t: t, ctx: ctx, st: st, model: model, workerBin: workerBin,
		workerEnv: append(common, "AGENTFLEET_WORKER_SLOTS=8", "AGENTFLEET_METRICS_LISTEN=127.0.0.1:0",
			"AGENTFLEET_MODEL=fake-model", "OPENAI_BASE_URL="+model.URL(), "AGENTFLEET_EGRESS_ALLOW=127.0.0.1")}
	f.first = f.startWorker("worker0")

	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	waitDispatcherReady(t, apiURL)
	tv, err := apiClient(t, apiURL, "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	f.tenant = apiClient(t, apiURL, tv.APIKey)
	return f
}

func (f *workerFleet) startWorker(name string) *proc {
	return startProc(f.t, name, f.workerBin, f.workerEnv)
}
