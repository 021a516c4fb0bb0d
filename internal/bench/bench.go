package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Scenarios.
const (
	Throughput = "throughput"
	Latency    = "latency"
	Scale      = "scale"
	Fairness   = "fairness"
	Chaos      = "chaos"
	Fanout     = "fanout"
	Webhooks   = "webhooks"
	Batch      = "batch"
)

// Scenarios lists the scenarios in the order the CLI documents them.
var Scenarios = []string{Throughput, Latency, Scale, Fairness, Chaos, Fanout, Webhooks, Batch}

// defaults of each scenario; a zero Config field takes them.
type defaults struct {
	runs, turns, workers, slots int
	latency                     time.Duration
}

var scenarioDefaults = map[string]defaults{
	Throughput: {runs: 2000, turns: 2, workers: 1, slots: 64},
	Latency:    {runs: 100, turns: 2, workers: 2, slots: 8},
	Scale:      {runs: 5000, turns: 2, workers: 1, latency: 2 * time.Second}, // slots: runs
	Fairness:   {runs: 300, turns: 2, workers: 2, slots: 4, latency: 100 * time.Millisecond},
	Chaos:      {runs: 300, turns: 3, workers: 3, slots: 8, latency: 20 * time.Millisecond},
	Fanout:     {runs: 200, turns: 2, workers: 1, slots: 16},
	Webhooks:   {runs: 5000, turns: 1, workers: 1, slots: 64},
	Batch:      {runs: 100_000, turns: 2, workers: 1, slots: 64},
}

// Other defaults.
const (
	SubmittersDefault = 32
	TimeoutDefault    = 30 * time.Minute
	StallDefault      = 60 * time.Second
	// FairnessBRunsDefault, FairnessBoundDefault and FairnessSettleDefault
	// shape the fairness scenario: B's runs, the bound on each one's
	// completion time, and how long A's backlog builds before B submits.
	FairnessBRunsDefault  = 4
	FairnessBoundDefault  = 1500 * time.Millisecond
	FairnessSettleDefault = 500 * time.Millisecond
	// ChaosAckWaitDefault is the AckWait of a chaos fleet: how soon a
	// killed worker's turns come back.
	ChaosAckWaitDefault = 5 * time.Second
	// LatencyDefault in Config.ModelLatency selects the scenario's.
	LatencyDefault time.Duration = -1
)

// Config configures a bench. Zero fields take the scenario's defaults.
type Config struct {
	// Scenario is one of Scenarios (default throughput).
	Scenario string
	// Runs and Turns: how many runs of how many turns. For fairness,
	// Runs is tenant A's backlog.
	Runs  int
	Turns int
	// ModelLatency delays every model reply; LatencyDefault (or any
	// negative value) selects the scenario's.
	ModelLatency time.Duration
	// Workers and Slots: in-process worker loops of an embedded fleet,
	// or worker processes of a fleet of processes, each with Slots
	// concurrent turns. Scale's slots default to its runs.
	Workers int
	Slots   int
	// Submitters submit runs concurrently (throughput, scale).
	Submitters int
	// Warmup runs go through the fleet before measuring (zero: a
	// default for the scenario; negative: none).
	Warmup int
	// Model's token counts and injected failures (its Latency and
	// Listen are set from ModelLatency and ModelListen).
	Model ModelConfig
	// ModelHTTP1: the embedded fleet's model client speaks HTTP/1.1 to
	// the fake model, a connection per call in flight, instead of
	// HTTP/2 (see modelHTTPClient).
	ModelHTTP1 bool
	// ModelListen is the fake model's address (default a free port).
	// Driving a fleet by URL, fix it so the workers can be configured
	// with it before they start.
	ModelListen string

	// DatabaseURL runs the fleet on Postgres in a fresh schema (Schema,
	// or a generated name) instead of SQLite.
	DatabaseURL string
	Schema      string
	// NATSURL runs an embedded fleet on an external NATS server.
	NATSURL string
	// NATSCreds is the creds file for NATSURL (AGENTFLEET_NATS_CREDS).
	NATSCreds string
	// URL and Token drive an existing fleet through its API with the
	// admin token; NATSURL then names its NATS server for the latency
	// scenario's subscriber.
	URL   string
	Token string
	// Spawn runs the fleet as processes (as chaos does): a NATS server,
	// a dispatcher and Workers workers, all this binary (Executable)
	// re-executed in a role (ServeRole), on Postgres (DatabaseURL).
	Spawn      bool
	Executable string
	// AckWait of the fleet (embedded and spawned; zero: the default,
	// except chaos: ChaosAckWaitDefault).
	AckWait time.Duration
	// MaxWaiting of the workers' consumer (zero: sized from the slots).
	MaxWaiting int
	// GOMAXPROCS of each process of a spawned fleet. Zero gives each its
	// share of this machine's cores (SpawnGOMAXPROCS); a negative value
	// leaves Go's default, every core for every process.
	GOMAXPROCS int
	// ReadyDepth is the scheduler's cushion of turns ready for the
	// workers beyond their idle slots (zero: the fleet's default).
	ReadyDepth int
	// NATSCluster, with Spawn, runs NATS as a JetStream cluster of that
	// many nodes (3 or 5) with R3 streams instead of one server; chaos
	// then kills cluster nodes (clusterChaos) instead of its usual steps.
	NATSCluster int
	// PGRestartCmd restarts Postgres in the chaos scenario (run by
	// sh -c); empty skips that step.
	PGRestartCmd string

	// Fairness: B's runs, the bound on their completion, and how long
	// A's backlog builds first.
	BRuns          int
	FairnessBound  time.Duration
	FairnessSettle time.Duration

	// Timeout bounds the whole bench; Stall gives up waiting when no
	// run has finished for that long (the rest count as lost).
	Timeout time.Duration
	Stall   time.Duration

	// Progress receives a progress line about once a second (nil: none);
	// with ProgressTTY it is one line redrawn in place.
	Progress    io.Writer
	ProgressTTY bool
	// Logger receives the fleet's logs (nil: discarded).
	Logger *slog.Logger
	// KeepDir keeps the bench's temporary directory (data, logs).
	KeepDir bool
	// HeapProfile, for the scale scenario, receives a heap profile of
	// this process on the plateau (after a GC: what the in-flight turns
	// keep alive).
	HeapProfile string
	// TraceStub turns the fleet's tracing on, exporting OTLP/HTTP to a
	// collector stub in this process that counts what it receives (the
	// environment of this process and the fleet's is set for it).
	TraceStub bool
	// ProfileDir, for a fleet of processes, receives a CPU profile of
	// each (<role>-<n>.cpu; read them with go tool pprof and the binary).
	ProfileDir string
	// SideEffects makes every turn's script POST once to a loopback
	// side-effect target and call ai() once (on for chaos): the fleet's
	// workers get AGENTFLEET_EGRESS_ALLOW=127.0.0.1, and the report says
	// whether every POST arrived once and every model call was billed
	// once (Figures.Effects).
	SideEffects bool
}

// ConfigError is a Config that cannot run: a usage error.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func (c *Config) applyDefaults() error {
	if c.Scenario == "" {
		c.Scenario = Throughput
	}
	d, ok := scenarioDefaults[c.Scenario]
	if !ok {
		return &ConfigError{fmt.Errorf("unknown scenario %q: want one of %s", c.Scenario, strings.Join(Scenarios, ", "))}
	}
	if c.Scenario == Chaos {
		c.SideEffects = true
	}
	if c.Runs == 0 {
		c.Runs = d.runs
	}
	if c.Turns == 0 {
		c.Turns = d.turns
	}
	if c.ModelLatency < 0 {
		c.ModelLatency = d.latency
	}
	if c.Workers == 0 {
		c.Workers = d.workers
	}
	if c.Slots == 0 {
		c.Slots = d.slots
		if c.Scenario == Scale {
			c.Slots = c.Runs
		}
	}
	if c.Submitters == 0 {
		c.Submitters = SubmittersDefault
	}
	if c.Warmup == 0 {
		c.Warmup = min(c.Workers*c.Slots, 64)
	}
	if c.BRuns == 0 {
		c.BRuns = FairnessBRunsDefault
	}
	if c.FairnessBound == 0 {
		c.FairnessBound = FairnessBoundDefault
	}
	if c.FairnessSettle == 0 {
		c.FairnessSettle = FairnessSettleDefault
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Stall == 0 {
		c.Stall = StallDefault
		if c.Scenario == Chaos {
			c.Stall = 2 * StallDefault
		}
	}
	if c.Scenario == Chaos {
		c.Spawn = true
		if c.AckWait == 0 {
			c.AckWait = ChaosAckWaitDefault
		}
	}
	if c.GOMAXPROCS == 0 {
		c.GOMAXPROCS = SpawnGOMAXPROCS(runtime.NumCPU(), c.Workers)
	}
	c.Model.Latency = c.ModelLatency
	c.Model.Listen = c.ModelListen
	c.Model.keepRequests = c.Scenario == Chaos
	var errs []error
	if c.Runs < 1 || c.Turns < 1 || c.Workers < 1 || c.Slots < 1 || c.Submitters < 1 {
		errs = append(errs, fmt.Errorf("--runs, --turns, --workers, --slots and --submitters must be at least 1"))
	}
	if c.Turns > 100 {
		errs = append(errs, fmt.Errorf("--turns %d: at most 100", c.Turns))
	}
	if c.URL != "" && (c.Spawn || c.DatabaseURL != "") {
		errs = append(errs, fmt.Errorf("--url drives an existing fleet: it does not combine with --spawn, --database-url or chaos"))
	}
	if c.URL != "" && c.Token == "" {
		errs = append(errs, fmt.Errorf("--url needs --token, the fleet's admin token (the bench creates its own tenants)"))
	}
	if c.Spawn && c.DatabaseURL == "" {
		errs = append(errs, fmt.Errorf("a fleet of processes (--spawn, chaos) runs on Postgres: set --database-url, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	}
	if c.Spawn && c.NATSURL != "" {
		errs = append(errs, fmt.Errorf("--spawn starts its own NATS server: drop --nats-url"))
	}
	if c.NATSCluster != 0 && (c.NATSCluster < 3 || c.NATSCluster > 5 || !c.Spawn) {
		errs = append(errs, fmt.Errorf("--nats-cluster %d: a cluster of 3 to 5 nodes, for a fleet of processes (--spawn or chaos)", c.NATSCluster))
	}
	if c.ReadyDepth < 0 {
		errs = append(errs, fmt.Errorf("--ready-depth must not be negative"))
	}
	if c.Model.CompletionTokens < 0 || c.Model.PromptTokens < 0 || c.Model.Fail429 < 0 || c.Model.Fail500 < 0 {
		errs = append(errs, fmt.Errorf("token counts and failure counts must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return &ConfigError{err}
	}
	return nil
}

// Run runs the bench cfg describes and reports. An error means the bench
// could not run (a fleet that would not start, a tenant the API refused);
// a bench that ran returns its report, whose Err says whether its checks
// passed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	if cfg.Progress != nil {
		// The progress line and the scenario's own lines (say) come from
		// two goroutines.
		cfg.Progress = &lockedWriter{w: cfg.Progress}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	raiseNoFile()
	rep := &Report{Scenario: cfg.Scenario, Machine: machineInfo(), StartedAt: time.Now().UTC()}
	if rep.Machine.LoadAvg > float64(rep.Machine.NumCPU)/2 {
		rep.note("the machine was busy when the bench started (load %.2f on %d CPUs): other work skews the figures", rep.Machine.LoadAvg, rep.Machine.NumCPU)
	}
	start := time.Now()
	rep.Parameters = Parameters{
		Runs: cfg.Runs, Turns: cfg.Turns, ModelLatency: Duration(cfg.ModelLatency),
		Workers: cfg.Workers, Slots: cfg.Slots, AckWait: Duration(cfg.AckWait), ReadyDepth: cfg.ReadyDepth,
		PromptTokens: cfg.Model.PromptTokens, CompletionTokens: cfg.Model.CompletionTokens,
		Fail429: cfg.Model.Fail429, Fail500: cfg.Model.Fail500,
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := startModel(cfg.Model)
	if err != nil {
		return nil, err
	}
	defer m.close()
	var stub *otlpStub
	if cfg.TraceStub {
		if cfg.URL != "" {
			return nil, &ConfigError{fmt.Errorf("--trace-stub traces a fleet the bench runs, not one at --url (point its OTEL_EXPORTER_OTLP_ENDPOINT at a collector)")}
		}
		if stub, err = startOTLPStub(); err != nil {
			return nil, err
		}
		defer stub.close()
		defer stub.setEnv()()
		rep.Parameters.Tracing = "otlp-stub"
	}

	e := &env{cfg: cfg, rep: rep, model: m, tag: newToken()[:8], http: apiHTTPClient(cfg.Submitters)}
	defer e.http.CloseIdleConnections()
	if cfg.SideEffects {
		if e.effects, err = startEffectTarget(); err != nil {
			return nil, err
		}
		defer e.effects.close()
		m.setEffects(e.effects.URL())
		rep.Parameters.SideEffects = true
		if cfg.URL != "" {
			rep.note("side effects: the fleet's workers must allow %s (AGENTFLEET_EGRESS_ALLOW=127.0.0.1)", e.effects.URL())
		}
	}
	p := &rep.Parameters
	switch {
	case cfg.URL != "":
		p.Mode, p.Workers, p.Slots = "url", 0, 0
		e.fleet = &urlFleet{url: cfg.URL, token: cfg.Token, nats: cfg.NATSURL, creds: cfg.NATSCreds}
		rep.note("the bench's tenants (bench-%s-*) stay in the fleet", e.tag)
		e.printf("fake model listening at %s (AGENTFLEET_MODEL=%s OPENAI_BASE_URL=%s for the fleet's workers)\n", m.URL(), ModelName, m.URL())
	case cfg.Spawn:
		p.Mode, p.Store, p.NATS = "processes", "postgres", "process"
		if cfg.NATSCluster > 1 {
			p.NATS = fmt.Sprintf("cluster of %d processes, R%d streams", cfg.NATSCluster, ClusterReplicas)
		}
		p.MaxWaiting = maxWaiting(cfg, cfg.Workers*cfg.Slots)
		p.GOMAXPROCS = cfg.GOMAXPROCS
		pf, err := startProcFleet(ctx, cfg, m.URL())
		if err != nil {
			return nil, err
		}
		e.fleet, e.procs = pf, pf
		if cfg.KeepDir {
			rep.note("fleet process logs kept in %s", pf.logDir())
		}
		if cfg.ProfileDir != "" {
			rep.note("CPU profiles of the fleet's processes in %s", cfg.ProfileDir)
		}
		if cfg.Schema == "" {
			rep.note("Postgres schema %s left in place (DROP SCHEMA %s CASCADE to remove it)", pf.schema(), pf.schema())
		}
	default:
		p.Mode, p.Store, p.NATS = "embedded", "sqlite", "embedded"
		if cfg.DatabaseURL != "" {
			p.Store = "postgres"
		}
		if cfg.NATSURL != "" {
			p.NATS = "external"
		}
		p.MaxWaiting = maxWaiting(cfg, cfg.Workers*cfg.Slots)
		if cfg.NATSURL != "" && cfg.MaxWaiting == 0 {
			p.MaxWaiting = 0
		}
		ef, err := startEmbedded(ctx, cfg, m, logger)
		if err != nil {
			return nil, err
		}
		e.fleet = ef
		if cfg.DatabaseURL != "" && cfg.Schema == "" {
			s := schemaOf(ef.dev.Config.DatabaseURL)
			rep.note("Postgres schema %s left in place (DROP SCHEMA %s CASCADE to remove it)", s, s)
		}
		if cfg.KeepDir {
			rep.note("fleet data kept in %s", ef.dir)
		}
	}
	if p.MaxWaiting == 0 && p.Mode != "url" {
		p.MaxWaiting = bus.MaxWaitingDefault
	}
	var runErr error
	switch cfg.Scenario {
	case Throughput:
		runErr = e.throughput(ctx)
	case Latency:
		runErr = e.latency(ctx)
	case Scale:
		runErr = e.scale(ctx)
	case Fairness:
		runErr = e.fairness(ctx)
	case Chaos:
		if cfg.NATSCluster > 1 {
			runErr = e.clusterChaos(ctx)
		} else {
			runErr = e.chaos(ctx)
		}
	case Fanout:
		runErr = e.fanout(ctx)
	case Webhooks:
		runErr = e.webhooks(ctx)
	case Batch:
		runErr = e.batch(ctx)
	}
	e.stopProgress()
	closeErr := e.fleet.close()
	if stub != nil {
		// After the fleet's shutdown, which flushes its exporters.
		rep.Figures.Tracing = stub.figures()
	}
	rep.Elapsed = Duration(time.Since(start))
	if runErr != nil {
		return rep, runErr
	}
	if closeErr != nil {
		rep.note("fleet shutdown: %v", closeErr)
	}
	return rep, nil
}

// env is one bench in progress.
type env struct {
	cfg   Config
	rep   *Report
	model *model
	fleet target
	procs *procFleet // when the fleet is processes
	// effects is the side-effect target (Config.SideEffects).
	effects *effectTarget
	tag     string // tells this bench's tasks and tenants apart
	http    *http.Client

	progMu   sync.Mutex
	progStop func()
}

func apiHTTPClient(conc int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conc + 16
	tr.MaxIdleConnsPerHost = conc + 16
	return &http.Client{Transport: tr}
}

func (e *env) printf(format string, a ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, format, a...)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// say prints a line on the progress writer, above the progress line.
func (e *env) say(format string, a ...any) {
	if e.cfg.ProgressTTY {
		format = "\r\x1b[K" + format
	}
	e.printf(format+"\n", a...)
}

// tenant is a tenant the bench created, with a client holding its key
// and the tag of its tasks.
type tenant struct {
	id  string
	tag string
	c   *client.Client
	// submitted counts the runs submitted for the tenant.
	submitted atomic.Int64
}

func (e *env) tenant(ctx context.Context, name string) (*tenant, error) {
	admin := client.New(e.fleet.apiURL(), e.fleet.adminToken())
	admin.HTTP = e.http
	id := "bench-" + e.tag + "-" + name
	tv, err := admin.CreateTenant(ctx, wire.TenantRequest{ID: id})
	if err != nil {
		return nil, fmt.Errorf("create tenant %s (with the admin token): %w", id, err)
	}
	c := client.New(e.fleet.apiURL(), tv.APIKey)
	c.HTTP = e.http
	return &tenant{id: id, tag: e.tag + "-" + name, c: c}, nil
}

// submission is one accepted run.
type submission struct {
	i  int
	id string
	at time.Time
}

// submit submits runs from..to-1 of t with conc concurrent submitters.
// A failed submission is retried with the same idempotency key; one that
// keeps failing counts as a submit error.
func (e *env) submit(ctx context.Context, t *tenant, from, to, conc int) ([]submission, int) {
	var next atomic.Int64
	next.Store(int64(from))
	var mu sync.Mutex
	var subs []submission
	errs := 0
	var wg sync.WaitGroup
	for range min(conc, to-from) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to || ctx.Err() != nil {
					return
				}
				s, err := e.submitOne(ctx, t, i)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					subs = append(subs, s)
					t.submitted.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return subs, errs
}

func (e *env) submitOne(ctx context.Context, t *tenant, i int) (submission, error) {
	req := wire.RunCreateRequest{
		Message:        taskMessage(t.tag, i, e.cfg.Turns),
		IdempotencyKey: fmt.Sprintf("%s-%d", t.id, i),
		MaxTurns:       e.cfg.Turns + 1,
	}
	// A submission that failed for want of a server (refused, reset,
	// 5xx, 429) is sent again with the same idempotency key, as a careful
	// client does, for as long as a dispatcher takes to come back: the
	// key makes it one run, and a repeat publishes what the first
	// attempt may have left unpublished.
	giveUp := time.Now().Add(submitRetryFor)
	delay := 100 * time.Millisecond
	for {
		at := time.Now()
		run, err := t.c.CreateRun(ctx, req)
		if err == nil {
			return submission{i: i, id: run.ID, at: at}, nil
		}
		var apiErr *client.Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			return submission{}, err
		}
		if time.Now().Add(delay).After(giveUp) {
			return submission{}, err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return submission{}, ctx.Err()
		}
		delay = min(2*delay, time.Second)
	}
}

// submitRetryFor is how long a submission is retried while no dispatcher
// answers: beyond a dispatcher's restart (chaos kills one mid-submission).
const submitRetryFor = 30 * time.Second

// done is how many of t's runs have ended: the store's count, or, through
// the API, the last turns the fake model answered for t's tasks.
func (e *env) done(ctx context.Context, t *tenant) (int, error) {
	if st := e.fleet.store(); st != nil {
		return countRuns(ctx, st, t, agentfleet.RunStatus.Terminal)
	}
	return e.model.finalsOf(t.tag), nil
}

// pending is 0 when all of t's runs have ended, and 1 when one has not.
func (e *env) pending(ctx context.Context, t *tenant) (int, error) {
	if st := e.fleet.store(); st != nil {
		// One unfinished run is enough to know: counting them all reads
		// every run of the tenant, a cost that grows with the bench and
		// lands on the fleet's database while it is being measured.
		list, err := st.RunList(ctx, store.RunListParams{Tenant: t.id, Status: nonTerminal, Limit: 1})
		if err != nil {
			return 0, err
		}
		return len(list.Runs), nil
	}
	list, err := t.c.ListRuns(ctx, client.ListRunsParams{Status: nonTerminal, Limit: 1})
	if err != nil {
		return 0, err
	}
	return len(list.Runs), nil
}

// countRuns counts t's runs whose status is in.
func countRuns(ctx context.Context, st store.Store, t *tenant, in func(agentfleet.RunStatus) bool) (int, error) {
	c, err := st.RunCountByStatus(ctx, t.id)
	if err != nil {
		return 0, err
	}
	n := 0
	for s, k := range c {
		if in(s) {
			n += k
		}
	}
	return n, nil
}

var nonTerminal = []agentfleet.RunStatus{
	agentfleet.StatusQueued, agentfleet.StatusRunning,
	agentfleet.StatusWaitingBudget, agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren,
}

// waitAll waits until none of t's runs is pending. It gives up with
// errStalled when the model served nothing for cfg.Stall (nothing moves).
//
// It asks the store four times a second until the model has answered as
// many last turns as t has runs (no run can end before that), and every
// 20 ms after, for the last commits: asking reads all of t's runs, and at
// 20 ms throughout it loaded the database under test more the longer the
// bench ran.
func (e *env) waitAll(ctx context.Context, t *tenant) error {
	const slowPoll = 250 * time.Millisecond
	lastServed, lastMove := e.model.served(), time.Now()
	var lastAsked time.Time
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if e.model.finalsOf(t.tag) >= int(t.submitted.Load()) || time.Since(lastAsked) >= slowPoll {
			lastAsked = time.Now()
			n, err := e.pending(ctx, t)
			if err == nil && n == 0 {
				return nil
			}
		}
		if s := e.model.served(); s != lastServed {
			lastServed, lastMove = s, time.Now()
		} else if time.Since(lastMove) > e.cfg.Stall {
			return errStalled
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish ends a wait for t's runs: it stops the progress line, returns
// waitErr when the bench itself was stopped (any other error becomes a
// note: the figures are those of what finished), and collects the runs,
// whose counts become the report's.
func (e *env) finish(ctx context.Context, t *tenant, subs []submission, submitErrs int, waitErr error) (RunCounts, []agentfleet.Run, time.Time, error) {
	e.stopProgress()
	if waitErr != nil && ctx.Err() != nil {
		return RunCounts{}, nil, time.Time{}, waitErr
	}
	if waitErr != nil {
		e.rep.note("stopped waiting: %v", waitErr)
	}
	counts, runs, last, err := e.collect(ctx, t, subs, submitErrs)
	if err == nil {
		e.rep.Figures.Runs = counts
	}
	return counts, runs, last, err
}

// wallTime is from start to the last run's end, or, when no run's end is
// known, to when the bench saw them all ended.
func wallTime(start, last, detected time.Time) time.Duration {
	if wall := last.Sub(start); !last.IsZero() && wall > 0 {
		return wall
	}
	return detected.Sub(start)
}

// listRuns returns all of t's runs.
func (e *env) listRuns(ctx context.Context, t *tenant) ([]agentfleet.Run, error) {
	var all []agentfleet.Run
	cursor := ""
	for {
		var page []agentfleet.Run
		var next string
		if st := e.fleet.store(); st != nil {
			res, err := st.RunList(ctx, store.RunListParams{Tenant: t.id, Limit: 500, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			page, next = res.Runs, res.NextCursor
		} else {
			res, err := t.c.ListRuns(ctx, client.ListRunsParams{Limit: 500, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			page, next = res.Runs, res.NextCursor
		}
		all = append(all, page...)
		if next == "" || len(page) == 0 {
			return all, nil
		}
		cursor = next
	}
}

// collect judges t's runs against the submissions: completed with the
// expected answer after the expected turns, failed otherwise, lost when
// not ended. It also returns the latest completion time.
func (e *env) collect(ctx context.Context, t *tenant, subs []submission, submitErrs int) (RunCounts, []agentfleet.Run, time.Time, error) {
	runs, err := e.listRuns(ctx, t)
	if err != nil {
		return RunCounts{}, nil, time.Time{}, fmt.Errorf("list runs of %s: %w", t.id, err)
	}
	byID := make(map[string]agentfleet.Run, len(runs))
	for _, r := range runs {
		byID[r.ID] = r
	}
	c := RunCounts{Submitted: len(subs), SubmitErrors: submitErrs}
	var last time.Time
	example := func(format string, a ...any) {
		if len(c.FailedExamples) < 5 {
			c.FailedExamples = append(c.FailedExamples, fmt.Sprintf(format, a...))
		}
	}
	for _, s := range subs {
		r, ok := byID[s.id]
		switch {
		case !ok:
			c.Lost++
			example("%s: accepted but not in the store", s.id)
			continue
		case !r.Status.Terminal():
			c.Lost++
			example("%s: still %s after %d turns", s.id, r.Status, r.Turn)
			continue
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
		want := `"` + expectedAnswer(s.i, e.cfg.Turns) + `"`
		if r.Status == agentfleet.StatusCompleted && string(r.Answer) == want && r.Turn == e.cfg.Turns {
			c.Completed++
			c.Turns += r.Turn
			continue
		}
		c.Failed++
		example("%s: %s after %d turns, answer %s, error %q (want %s)", s.id, r.Status, r.Turn, r.Answer, r.Error, want)
	}
	return c, runs, last, nil
}

// warmup runs n runs through the fleet in a tenant of their own, so the
// measurement starts with sandbox processes up and connections open.
func (e *env) warmup(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	t, err := e.tenant(ctx, "warmup")
	if err != nil {
		return err
	}
	subs, errs := e.submit(ctx, t, 0, n, min(n, e.cfg.Submitters))
	if errs > 0 {
		return fmt.Errorf("warm-up: %d of %d submissions failed", errs, n)
	}
	if err := e.waitAll(ctx, t); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	c, _, _, err := e.collect(ctx, t, subs, 0)
	if err != nil {
		return err
	}
	if c.Completed != n {
		return fmt.Errorf("warm-up: %d of %d runs completed; %v", c.Completed, n, c.FailedExamples)
	}
	e.rep.Parameters.Warmup = n
	return nil
}

// startProgress shows line() about once a second until stopProgress.
func (e *env) startProgress(line func(elapsed time.Duration) string) {
	w := e.cfg.Progress
	if w == nil {
		return
	}
	e.stopProgress()
	start := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	interval := time.Second
	if !e.cfg.ProgressTTY {
		interval = 10 * time.Second
	}
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if e.cfg.ProgressTTY {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case <-t.C:
				s := line(time.Since(start).Truncate(time.Second))
				if e.cfg.ProgressTTY {
					fmt.Fprintf(w, "\r\x1b[K%s", s)
				} else {
					fmt.Fprintln(w, s)
				}
			}
		}
	}()
	e.progMu.Lock()
	e.progStop = func() { close(stop); <-done }
	e.progMu.Unlock()
}

func (e *env) stopProgress() {
	e.progMu.Lock()
	stop := e.progStop
	e.progStop = nil
	e.progMu.Unlock()
	if stop != nil {
		stop()
	}
}

// turnRate returns a progress line of runs done and model calls (turns)
// per second over the last interval.
func (e *env) turnRate(total int) func(time.Duration) string {
	lastServed, lastAt := e.model.served(), time.Now()
	base := int(e.model.finals.Load())
	return func(elapsed time.Duration) string {
		s, now := e.model.served(), time.Now()
		rate := float64(s-lastServed) / now.Sub(lastAt).Seconds()
		lastServed, lastAt = s, now
		done := min(int(e.model.finals.Load())-base, total)
		return fmt.Sprintf("%s %s: %d/%d runs done, %.0f turns/s, %d model calls in flight",
			elapsed, e.cfg.Scenario, done, total, rate, e.model.inflight())
	}
}
