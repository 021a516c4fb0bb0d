package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/procstat"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
)

// procFleet is a fleet of processes of the bench's own binary (see
// ServeRole): a NATS server, a dispatcher and Config.Workers workers with
// Config.Slots slots each, on Postgres in a fresh schema: production
// shape on one machine.
type procFleet struct {
	cfg      Config
	exe      string
	dir      string
	modelURL string
	st       *postgres.Store
	dbURL    string
	token    string
	// secretsKey is every process's AGENTFLEET_SECRETS_KEY.
	secretsKey string

	// nats are the NATS server's nodes: one, or Config.NATSCluster.
	nats    []*natsNode
	apiPort int

	mu         sync.Mutex
	dispatcher *proc
	// metricsURL is the dispatcher's /metrics: each dispatcher listens on
	// a free port of its own and logs it.
	metricsURL string
	workers    []*proc
	seq        int // names restarted processes apart
}

func startProcFleet(ctx context.Context, cfg Config, modelURL string) (_ *procFleet, err error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("a fleet of processes runs on Postgres: set --database-url, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	exe := cfg.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own binary to start fleet processes: %w", err)
		}
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "agentfleet-bench-procs-*")
	if err != nil {
		return nil, err
	}
	f := &procFleet{cfg: cfg, exe: exe, dir: dir, modelURL: modelURL, token: newToken(), secretsKey: secrets.NewKey()}
	defer func() {
		if err != nil {
			_ = f.close()
		}
	}()
	if f.dbURL, err = freshSchema(ctx, cfg); err != nil {
		return nil, err
	}
	// The bench reads the fleet's store directly (counts, traces).
	if f.st, err = postgres.Open(ctx, postgres.Config{URL: cfg.DatabaseURL, Schema: schemaOf(f.dbURL), MaxConns: 4}); err != nil {
		return nil, err
	}
	if f.nats, err = newNATSNodes(dir, max(1, cfg.NATSCluster)); err != nil {
		return nil, err
	}
	if f.apiPort, err = freePort(); err != nil {
		return nil, err
	}
	for i := range f.nats {
		if err := f.startNATS(ctx, i, false); err != nil {
			return nil, err
		}
	}
	if err := f.startDispatcher(ctx); err != nil {
		return nil, err
	}
	for range cfg.Workers {
		if _, err := f.startWorker(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *procFleet) name(base string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return fmt.Sprintf("%s-%d", base, f.seq)
}

func (f *procFleet) commonEnv(name string) []string {
	env := []string{
		"AGENTFLEET_NATS_URL=" + f.natsURL(),
		"AGENTFLEET_DATABASE_URL=" + f.dbURL,
		"AGENTFLEET_DATA_DIR=" + filepath.Join(f.dir, name),
		secrets.EnvKey + "=" + f.secretsKey,
	}
	if len(f.nats) > 1 {
		env = append(env, "AGENTFLEET_NATS_REPLICAS="+strconv.Itoa(ClusterReplicas))
	}
	env = append(env, f.procEnv(name)...)
	if f.cfg.AckWait > 0 {
		env = append(env, "AGENTFLEET_ACK_WAIT="+f.cfg.AckWait.String())
	}
	if f.cfg.ReadyDepth > 0 {
		env = append(env, "AGENTFLEET_READY_DEPTH="+strconv.Itoa(f.cfg.ReadyDepth))
	}
	if mw := maxWaiting(f.cfg, f.cfg.Workers*f.cfg.Slots); mw > 0 {
		env = append(env, "AGENTFLEET_MAX_WAITING="+strconv.Itoa(mw))
	}
	return env
}

// procEnv is what every process of the fleet gets: its GOMAXPROCS, and
// a CPU profile when the bench has a profile directory.
func (f *procFleet) procEnv(name string) []string {
	var env []string
	if f.cfg.GOMAXPROCS > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(f.cfg.GOMAXPROCS))
	}
	if f.cfg.ProfileDir != "" {
		env = append(env, EnvRoleCPUProfile+"="+filepath.Join(f.cfg.ProfileDir, name+".cpu"))
	}
	return env
}

// SpawnGOMAXPROCS is the GOMAXPROCS a spawned fleet's processes get by
// default: the machine's cores divided among them (the NATS server, the
// dispatcher and the workers), at least one each, as if each ran in a
// container with that CPU limit (Go sizes GOMAXPROCS from a container's
// limit). Left at Go's default, every process of a fleet sharing a small
// machine runs as many Ps as there are cores, and an idle P's thread is
// woken to look for work whenever a goroutine becomes runnable: on 2
// cores shared by 3 processes, one P each cut the production bench's CPU
// per turn by 8–33% (BENCHMARKS.md).
func SpawnGOMAXPROCS(numCPU, workers int) int {
	return max(1, numCPU/(2+workers))
}

// crashDispatcher SIGKILLs the dispatcher, starts another on the same
// API address, and returns how long after the kill the new one was
// scheduling. It takes over the scheduler lease when the dead one does not
// answer its probe subject (bus.Lease), well before the lease's TTL.
func (f *procFleet) crashDispatcher(ctx context.Context) (time.Duration, error) {
	f.mu.Lock()
	old := f.dispatcher
	f.mu.Unlock()
	killed := time.Now()
	old.kill()
	if err := f.startDispatcher(ctx); err != nil {
		return 0, err
	}
	const bound = time.Minute
	for {
		leading, err := f.schedulerLeading(ctx)
		switch {
		case leading:
			return time.Since(killed), nil
		case time.Since(killed) > bound && err != nil:
			return 0, fmt.Errorf("the new dispatcher was not scheduling %s after the kill: %w", bound, err)
		case time.Since(killed) > bound:
			return 0, fmt.Errorf("the new dispatcher was not scheduling %s after the kill: agentfleet_scheduler_leading stayed 0", bound)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// schedulerLeading reads the dispatcher's agentfleet_scheduler_leading.
func (f *procFleet) schedulerLeading(ctx context.Context) (bool, error) {
	f.mu.Lock()
	url := f.metricsURL
	f.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "agentfleet_scheduler_leading "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, sc.Err()
}

func (f *procFleet) startDispatcher(ctx context.Context) error {
	name := f.name("dispatcher")
	env := append(f.commonEnv(name), "AGENTFLEET_LISTEN=127.0.0.1:"+strconv.Itoa(f.apiPort),
		"AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN="+f.token)
	p, err := startProc(f.exe, name, filepath.Join(f.dir, name+".log"), dispatcherReadyLine, []string{RoleCommand, "dispatcher"}, env)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.dispatcher = p
	f.mu.Unlock()
	line, err := p.waitReady(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	murl := logValue(line, "metrics")
	if !strings.HasPrefix(murl, "http://") {
		return fmt.Errorf("%s's ready line names no metrics URL: %s", name, line)
	}
	f.mu.Lock()
	f.metricsURL = murl
	f.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.apiURL()+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dispatcher not ready after 60s; its log: %s%s", p.log, p.tail())
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// logValue is the value of key in a log/slog text line (key=value, the
// value unquoted), or "".
func logValue(line, key string) string {
	for _, field := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(field, key+"="); ok {
			return v
		}
	}
	return ""
}

func (f *procFleet) startWorker(ctx context.Context) (*proc, error) {
	name := f.name("worker")
	env := append(f.commonEnv(name),
		"AGENTFLEET_WORKER_SLOTS="+strconv.Itoa(f.cfg.Slots),
		"AGENTFLEET_METRICS_LISTEN=127.0.0.1:0",
		"AGENTFLEET_MODEL="+ModelName, "OPENAI_BASE_URL="+f.modelURL, "OPENAI_API_KEY=",
		"AGENTFLEET_MODEL_STREAM="+string(f.cfg.Stream))
	if f.cfg.SideEffects {
		env = append(env, "AGENTFLEET_EGRESS_ALLOW=127.0.0.1")
	}
	p, err := startProc(f.exe, name, filepath.Join(f.dir, name+".log"), workerReadyLine, []string{RoleCommand, "worker"}, env)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.workers = append(f.workers, p)
	f.mu.Unlock()
	if _, err := p.waitReady(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// roleUsage is what a role's processes have used so far: CPU time, and
// context switches of their live threads.
type roleUsage struct {
	cpu      time.Duration
	switches int64
}

// usageByRole is what the fleet's live processes have used so far, by
// role; "sandbox" is the workers' sandbox processes (live, and for CPU
// also reaped).
func (f *procFleet) usageByRole() map[string]roleUsage {
	f.mu.Lock()
	procs := map[string][]*proc{"nats": f.natsProcs(), "dispatcher": {f.dispatcher}, "worker": f.workers}
	f.mu.Unlock()
	out := map[string]roleUsage{}
	add := func(role string, cpu time.Duration, switches int64) {
		u := out[role]
		u.cpu += cpu
		u.switches += switches
		out[role] = u
	}
	for role, ps := range procs {
		for _, p := range ps {
			if p == nil || p.cmd.Process == nil {
				continue
			}
			st, ok := procstat.Read(p.cmd.Process.Pid)
			if !ok {
				continue // exited
			}
			add(role, st.CPU, threadSwitches(st.PID))
			if role == "worker" {
				add("sandbox", st.ReapedCPU, 0) // reaped sandbox processes: CPU only
				for _, d := range descendantsOf(st.PID) {
					add("sandbox", d.CPU+d.ReapedCPU, threadSwitches(d.PID))
				}
			}
		}
	}
	return out
}

// stopWorkers drains and stops every worker process, and restartWorkers
// starts as many again: the webhooks scenario measures its burst with no
// worker running.
func (f *procFleet) stopWorkers() {
	f.mu.Lock()
	workers := f.workers
	f.workers = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.stop(20 * time.Second) })
	}
	wg.Wait()
}

func (f *procFleet) restartWorkers(ctx context.Context) error {
	for range f.cfg.Workers {
		if _, err := f.startWorker(ctx); err != nil {
			return err
		}
	}
	return nil
}

// killWorker SIGKILLs worker i (of those started, in order).
func (f *procFleet) killWorker(i int) {
	f.mu.Lock()
	p := f.workers[i]
	f.mu.Unlock()
	p.kill()
}

func (f *procFleet) apiURL() string     { return "http://127.0.0.1:" + strconv.Itoa(f.apiPort) }
func (f *procFleet) adminToken() string { return f.token }
func (f *procFleet) store() store.Store { return f.st }
func (f *procFleet) natsCreds() string  { return "" }
func (f *procFleet) local() bool        { return true }
func (f *procFleet) schema() string     { return schemaOf(f.dbURL) }
func (f *procFleet) logDir() string     { return f.dir }

// close stops the workers (drain), the dispatcher and the NATS server, in
// that order, and removes the directory unless asked to keep it.
func (f *procFleet) close() error {
	f.mu.Lock()
	workers, dispatcher, nats := f.workers, f.dispatcher, f.natsProcs()
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.stop(20 * time.Second) }()
	}
	wg.Wait()
	if dispatcher != nil {
		dispatcher.stop(15 * time.Second)
	}
	for _, n := range nats {
		n.stop(15 * time.Second)
	}
	if f.st != nil {
		_ = f.st.Close()
	}
	if !f.cfg.KeepDir {
		_ = os.RemoveAll(f.dir)
	}
	return nil
}
