package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/procstat"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
)

// RoleCommand is the hidden agentctl subcommand that makes the binary one
// process of a fleet: `agentctl __serve nats|dispatcher|worker`. The bench
// re-executes its own binary this way to run a fleet of processes on a
// machine that has no Go toolchain and no nats-server.
const RoleCommand = "__serve"

// Readiness lines the roles print (the dispatcher and worker lines are
// their log messages; the dispatcher's names its API and metrics URLs).
const (
	natsReadyLine       = "nats ready "
	dispatcherReadyLine = "dispatcher listening"
	workerReadyLine     = "worker running"
)

// EnvRoleCPUProfile, set for a role, makes it write a CPU profile of
// itself to that file (agentctl bench --profile-dir).
const EnvRoleCPUProfile = "AGENTFLEET_BENCH_CPUPROFILE"

// ServeRole runs one fleet process until ctx ends (SIGTERM):
//
//	nats --listen HOST:PORT --store-dir DIR   a NATS server with JetStream
//	                                          (the server the fleet embeds, as a process);
//	     [--name N --cluster-name C           a node of cluster C, its routes on HOST:PORT
//	      --cluster HOST:PORT --routes URLS]
//	dispatcher                                fleet.RunDispatcher, configured by the environment
//	worker                                    fleet.RunWorker (SIGTERM drains), ditto
//
// The environment is the one the README lists, as for cmd/dispatcher and cmd/worker.
func ServeRole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(RoleCommand + ": name a role: nats, dispatcher or worker")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if path := os.Getenv(EnvRoleCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	switch args[0] {
	case "nats":
		fs := flag.NewFlagSet("nats", flag.ContinueOnError)
		fs.SetOutput(stderr)
		listen := fs.String("listen", "127.0.0.1:0", "client address")
		dir := fs.String("store-dir", "", "JetStream store directory")
		name := fs.String("name", "", "server name (a cluster node needs one)")
		clusterName := fs.String("cluster-name", "", "the cluster's name: makes the server a cluster node")
		clusterListen := fs.String("cluster", "", "this node's route address host:port")
		routes := fs.String("routes", "", "the other nodes' route URLs, comma-separated")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("nats: --store-dir is required")
		}
		ecfg := bus.EmbeddedConfig{Name: *name, Listen: *listen, StoreDir: *dir, Logger: logger.With("role", "nats")}
		if *clusterName != "" {
			ecfg.Cluster = &bus.EmbeddedCluster{Name: *clusterName, Listen: *clusterListen, Routes: strings.Split(*routes, ",")}
		}
		emb, err := bus.StartEmbedded(ecfg)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, natsReadyLine+emb.ClientURL())
		<-ctx.Done()
		emb.Shutdown()
		return nil
	case "dispatcher", "worker":
		cfg, err := fleet.ConfigFromEnv()
		if err != nil {
			return err
		}
		if args[0] == "dispatcher" {
			return fleet.RunDispatcher(ctx, cfg, logger)
		}
		return fleet.RunWorker(ctx, cfg, logger)
	}
	return fmt.Errorf("%s: unknown role %q: want nats, dispatcher or worker", RoleCommand, args[0])
}

// proc is one fleet process the bench started. Its output goes to a log
// file in the bench's directory.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	pipe    *os.File
	ready   chan string // the readiness line
	exited  chan struct{}
	logDone chan struct{}
	err     error
	once    sync.Once
}

func startProc(exe, name, logPath, readyLine string, args, env []string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	// Die with the bench: a fleet process must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pw.Close()
	p := &proc{name: name, cmd: cmd, log: logPath, pipe: pr, ready: make(chan string, 1), exited: make(chan struct{}), logDone: make(chan struct{})}
	go func() {
		defer close(p.logDone)
		defer logFile.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if !signalled && strings.Contains(line, readyLine) {
				p.ready <- line
				signalled = true
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady waits for the process's readiness line.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-p.ready:
		return line, nil
	case <-p.exited:
		return "", fmt.Errorf("%s exited before it was ready (%v); its log: %s%s", p.name, p.err, p.log, p.tail())
	case <-t.C:
		return "", fmt.Errorf("%s not ready after %s; its log: %s%s", p.name, timeout, p.log, p.tail())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop ends the process with SIGTERM (a drain, for a worker), or SIGKILL
// after timeout, and waits for it and its log.
func (p *proc) stop(timeout time.Duration) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.finishLog()
	})
}

// kill ends the process as a crash would.
func (p *proc) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.finishLog()
	})
}

// finishLog waits for the log copier; a grandchild that kept the pipe
// open must not hold the bench, so the pipe is closed after a while.
func (p *proc) finishLog() {
	select {
	case <-p.logDone:
	case <-time.After(2 * time.Second):
		_ = p.pipe.Close()
		<-p.logDone
	}
	_ = p.pipe.Close()
}

func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return "\n--- " + p.name + " log (tail) ---\n" + string(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

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
	// secretsKey is every dispatcher's AGENTFLEET_SECRETS_KEY.
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
		"AGENTFLEET_METRICS_LISTEN=127.0.0.1:0", "AGENTFLEET_ADMIN_TOKEN="+f.token, secrets.EnvKey+"="+f.secretsKey)
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
		"AGENTFLEET_MODEL="+ModelName, "OPENAI_BASE_URL="+f.modelURL, "OPENAI_API_KEY=")
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
