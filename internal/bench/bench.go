package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/llm"
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
	Session    = "session"
	Tools      = "tools"
)

// Scenarios lists the scenarios in the order the CLI documents them.
var Scenarios = []string{Throughput, Latency, Scale, Fairness, Chaos, Fanout, Webhooks, Batch, Session, Tools}

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
	Session:    {runs: 30, turns: 2, workers: 1, slots: 8},
	Tools:      {runs: 1000, turns: 1, workers: 1, slots: 8}, // runs: calls per series
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
	// Stream is the fleet's AGENTFLEET_MODEL_STREAM (auto, on, off;
	// empty: auto, which streams from the fake model).
	Stream llm.StreamMode
	// Secrets is how many secrets each bench tenant holds (random
	// 32-byte values, bound to a host no run calls): every turn of the
	// tenant then loads them and redacts their values from all it
	// produces, which is the cost this measures.
	Secrets int
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
	if m, err := llm.ParseStreamMode(string(c.Stream)); err != nil {
		errs = append(errs, fmt.Errorf("--stream: %w", err))
	} else {
		c.Stream = m
	}
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
	if c.Secrets < 0 || c.Secrets > 1000 {
		errs = append(errs, fmt.Errorf("--secrets %d: 0 to 1000 secrets per tenant", c.Secrets))
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
		Fail429: cfg.Model.Fail429, Fail500: cfg.Model.Fail500, Stream: string(cfg.Stream),
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
	case Session:
		runErr = e.session(ctx)
	case Tools:
		runErr = e.tools(ctx)
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
