package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/internal/telemetry"
	"github.com/agentfleet/agentfleet/internal/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpenStore opens the store the configuration names: Postgres when
// DatabaseURL is set, otherwise SQLite in the data directory.
func OpenStore(ctx context.Context, cfg Config) (store.Store, error) {
	if cfg.DatabaseURL != "" {
		s, err := postgres.Open(ctx, postgres.Config{URL: cfg.DatabaseURL, MaxConns: cfg.databaseMaxConns()})
		if err != nil {
			return nil, fmt.Errorf("open postgres store: %w", err)
		}
		return s, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: cfg.SQLitePath()})
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", cfg.SQLitePath(), err)
	}
	return s, nil
}

// OpenBus connects to NATS: the server at NATSURL, or an embedded one
// started here (listening on NATSListen when set, storing in the data
// directory). The embedded server, when there is one, is returned for the
// caller to shut down after closing the bus. role ("dispatcher",
// "worker", "dev") names the connection, with the process id and host,
// in the server's monitoring and as a lease holder.
func OpenBus(ctx context.Context, cfg Config, role string, logger *slog.Logger) (*bus.Bus, *bus.Embedded, error) {
	bcfg := bus.Config{
		URL: cfg.NATSURL, Name: connName(role), Prefix: cfg.Prefix, AckWait: cfg.AckWait, MaxWaiting: cfg.MaxWaiting,
		EventsMaxAge: cfg.EventsMaxAge, Logger: logger, CredsFile: cfg.NATSCreds,
		Replicas: cfg.NATSReplicas, TLSCA: cfg.NATSTLSCA, TLSCert: cfg.NATSTLSCert, TLSKey: cfg.NATSTLSKey,
	}
	if _, err := os.Stat(cfg.NATSCreds); cfg.NATSCreds != "" && err != nil {
		return nil, nil, fmt.Errorf("AGENTFLEET_NATS_CREDS=%q: %w (write it with: agentctl nats-auth DIR)", cfg.NATSCreds, err)
	}
	if cfg.NATSURL != "" {
		b, err := bus.Connect(ctx, bcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to NATS at %s: %w", cfg.NATSURL, err)
		}
		return b, nil, nil
	}
	if err := os.MkdirAll(cfg.NATSStoreDir(), 0o755); err != nil {
		return nil, nil, fmt.Errorf("create NATS store dir: %w", err)
	}
	if bcfg.Replicas > 1 {
		logger.Warn("the embedded NATS server is one server: its streams have 1 replica", "AGENTFLEET_NATS_REPLICAS", bcfg.Replicas)
	}
	bcfg.Replicas = 1
	authConf, err := cfg.embeddedAuthConf()
	if err != nil {
		return nil, nil, err
	}
	emb, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir(), Logger: logger, AuthConf: authConf})
	if err != nil {
		return nil, nil, fmt.Errorf("start embedded NATS: %w", err)
	}
	b, err := bus.Connect(ctx, bcfg, bus.WithEmbedded(emb))
	if err != nil {
		emb.Shutdown()
		return nil, nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	return b, emb, nil
}

// NewRegistry returns a Prometheus registry with the Go and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// WorkerConfig configures a WorkerProcess.
type WorkerConfig struct {
	// Workers is how many Worker loops share this process's engine
	// (dev mode runs several; a worker process runs one).
	Workers int
	Slots   int
	Model   llm.Config
	// ModelClient, when set, is used instead of building one from Model
	// (tests and benchmarks pass fakes).
	ModelClient llm.Client
	Sandbox     sandbox.Config
	Store       store.Store
	Bus         *bus.Bus
	Registry    *prometheus.Registry
	Logger      *slog.Logger
	// Queue is where turns are pulled from (the scheduler's work queue
	// by default).
	Queue bus.Queue
	// WorkerConfig fields passed through to every worker.
	RetryDelay time.Duration
	// BudgetMetrics: see DispatcherConfig.
	BudgetMetrics *budget.Metrics
	// Tracer traces the process's turns; nil means one from the
	// standard OpenTelemetry environment (off unless it asks).
	Tracer *telemetry.Tracer
	// Secrets opens the tenants' secrets for their turns
	// (AGENTFLEET_SECRETS_KEY, and the previous keys); nil: a tenant
	// that has secrets has its turns fail until the key is set.
	Secrets *secrets.Box
}

// WorkerProcess is a worker process's work: one model client, one
// sandbox pool, one engine, and Workers turn loops on them.
type WorkerProcess struct {
	Workers []*worker.Worker
	Engine  *loop.Engine
	Meter   *budget.Meter
	pool    *sandbox.Pool
	model   llm.Client
	// tracer is shut down by Close when the process made it.
	tracer *telemetry.Tracer
}

// NewWorkerProcess builds the engine and the workers.
func NewWorkerProcess(cfg WorkerConfig) (*WorkerProcess, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	cfg.Slots = capSlots(cfg.Slots, cfg.Workers, cfg.Sandbox, cfg.Logger)
	model := cfg.ModelClient
	if model == nil {
		var err error
		if model, err = llm.New(cfg.Model); err != nil {
			return nil, fmt.Errorf("model client: %w", err)
		}
	}
	if cfg.Sandbox.Logger == nil {
		cfg.Sandbox.Logger = cfg.Logger
	}
	pool, err := sandbox.New(cfg.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("sandbox pool: %w", err)
	}
	bm := cfg.BudgetMetrics
	if bm == nil {
		bm = budget.NewMetrics(cfg.Registry)
	}
	meter, err := budget.NewMeter(budget.MeterConfig{
		Store: cfg.Store, Metrics: bm,
		MaxHold: llm.LongestCall(cfg.Model) + loop.RecordRetryForDefault,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	tracer, ownTracer := cfg.Tracer, cfg.Tracer == nil
	if ownTracer {
		if tracer, err = telemetry.FromEnv(context.Background(), "agentfleet-worker"); err != nil {
			pool.Close()
			return nil, err
		}
	}
	provider := "openai"
	if cfg.ModelClient == nil && llm.IsDemo(cfg.Model) {
		provider = "agentfleet.demo"
	}
	engine, err := loop.New(loop.Config{
		Model:   tracer.Model(llm.NewMetrics(cfg.Registry).Instrument(model), provider),
		Sandbox: tracer.Sandbox(pool), Meter: meter, Recorder: recorder{s: cfg.Store, meter: meter},
		Journal: recorder{s: cfg.Store, meter: meter}, DefaultModel: cfg.Model.Model,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	wm := worker.NewMetrics(cfg.Registry)
	registerSandboxGauges(cfg.Registry, pool)
	wp := &WorkerProcess{Engine: engine, Meter: meter, pool: pool, model: model}
	if ownTracer {
		wp.tracer = tracer
	}
	var providerKeys []string
	if cfg.Model.APIKey != "" {
		providerKeys = append(providerKeys, cfg.Model.APIKey)
	}
	source := newSecretSource(cfg.Store, cfg.Secrets)
	queue := cfg.Queue
	if queue == 0 {
		queue = bus.QueueWork
	}
	for i := range cfg.Workers {
		w, err := worker.New(worker.Config{
			Bus: cfg.Bus, Store: cfg.Store, Engine: engine, Queue: queue, Slots: cfg.Slots,
			RetryDelay: cfg.RetryDelay, Secrets: providerKeys, SecretSource: source,
			Logger: cfg.Logger.With("worker", i), Metrics: wm, Tracer: tracer,
		})
		if err != nil {
			pool.Close()
			return nil, err
		}
		wp.Workers = append(wp.Workers, w)
	}
	return wp, nil
}

// registerSandboxGauges exports the pool's processes as
// agentfleet_sandbox_processes{state="busy"|"idle"}: a burst of turns
// waiting on fetch or ai starts processes beyond the pool's size, and
// they stop again once idle.
func registerSandboxGauges(reg prometheus.Registerer, pool *sandbox.Pool) {
	const help = "Sandbox processes of this worker process: running a turn (busy) or waiting for one (idle)."
	for _, state := range []string{"busy", "idle"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentfleet_sandbox_processes", Help: help, ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			live, idle := pool.Processes()
			if state == "idle" {
				return float64(idle)
			}
			return float64(live - idle)
		}))
	}
}

// Run runs every worker until ctx ends (which abandons in-flight turns,
// as a crash would; call Shutdown first to drain).
func (wp *WorkerProcess) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(wp.Workers))
	for i, w := range wp.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.Run(ctx) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Shutdown drains every worker within ctx.
func (wp *WorkerProcess) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, w := range wp.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Shutdown(ctx) }()
	}
	wg.Wait()
	return nil
}

// Close releases the sandbox pool. Call it after Run returned.
func (wp *WorkerProcess) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(wp.pool.Close(), wp.tracer.Shutdown(ctx))
}

// metricsServer serves a registry's /metrics, and a /healthz for a
// liveness probe, on a listener of its own: the metrics name every
// tenant, so they are kept off the public API port.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics binds addr (port 0 picks a free port) and logs the
// address chosen; serve serves it.
func listenMetrics(addr string, reg prometheus.Gatherer, logger *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s (AGENTFLEET_METRICS_LISTEN): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	m := &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	logger.Info("metrics listening", "url", m.URL())
	return m, nil
}

// URL is the address of /metrics.
func (m *metricsServer) URL() string { return "http://" + m.ln.Addr().String() + "/metrics" }

// serve serves until ctx ends, then shuts the server down.
func (m *metricsServer) serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- m.srv.Serve(m.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(sctx); err != nil {
		_ = m.srv.Close()
	}
	<-served
	return nil
}

// recorder adapts the store to the engine's reply Recorder.
type recorder struct {
	s     store.Store
	meter *budget.Meter
}

func (r recorder) RecordedReply(ctx context.Context, runID string, turn int) (loop.Reply, bool, error) {
	rep, err := r.s.ModelReplyGet(ctx, runID, turn)
	if errors.Is(err, store.ErrNotFound) {
		return loop.Reply{}, false, nil
	}
	if err != nil {
		return loop.Reply{}, false, err
	}
	return loop.Reply{RunID: rep.RunID, Turn: rep.Turn, Content: rep.Content, Model: rep.Model, Usage: rep.Usage, UsageReported: rep.UsageReported}, true, nil
}

// RecordReply records the reply and, given the turn's reservation,
// charges the call in the same store transaction.
func (r recorder) RecordReply(ctx context.Context, rep loop.Reply, charge *agentfleet.Reservation) (loop.Reply, bool, bool, error) {
	p := store.ModelReplyRecordParams{ModelReply: store.ModelReply{
		RunID: rep.RunID, Turn: rep.Turn, Content: rep.Content, Model: rep.Model, Usage: rep.Usage, UsageReported: rep.UsageReported,
	}}
	if charge != nil && r.meter != nil {
		settle := r.meter.SettleParams(*charge, rep.Usage, rep.Model)
		p.Charge = &settle
	}
	res, err := r.s.ModelReplyRecord(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		return loop.Reply{}, false, false, loop.ErrStale
	}
	if errors.Is(err, store.ErrInvalid) {
		return loop.Reply{}, false, false, fmt.Errorf("%w: %w", loop.ErrRejected, err)
	}
	if err != nil {
		return loop.Reply{}, false, false, err
	}
	charged := p.Charge != nil && !res.Existed && res.ChargeErr == nil
	if charged {
		r.meter.Settled(*charge, rep.Usage, rep.Model, res.Settled)
	}
	got := res.Reply
	return loop.Reply{RunID: got.RunID, Turn: got.Turn, Content: got.Content, Model: got.Model, Usage: got.Usage, UsageReported: got.UsageReported}, res.Existed, charged, nil
}

// JournalList reads a turn's journal for the engine.
func (r recorder) JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error) {
	return r.s.JournalListByRun(ctx, store.JournalListByRunParams{RunID: runID, Turn: turn})
}

// JournalRecord records a journal entry and, given an ai() call's
// reservation, charges the call in the same store transaction.
func (r recorder) JournalRecord(ctx context.Context, e agentfleet.JournalEntry, charge *agentfleet.Reservation, model string) (bool, bool, error) {
	p := store.JournalRecordParams{JournalEntry: e}
	if charge != nil && r.meter != nil {
		settle := r.meter.SettleParams(*charge, e.Usage, model)
		p.Charge = &settle
	}
	res, err := r.s.JournalRecord(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		return false, false, loop.ErrStale
	}
	if errors.Is(err, store.ErrInvalid) {
		return false, false, fmt.Errorf("%w: %w", loop.ErrRejected, err)
	}
	if err != nil {
		return false, false, err
	}
	charged := p.Charge != nil && !res.Existed && res.ChargeErr == nil
	if charged {
		r.meter.Settled(*charge, e.Usage, model, res.Settled)
	}
	return res.Existed, charged, nil
}

// ModelName is the model a process reports using, for logs.
func ModelName(c llm.Config) string {
	if llm.IsDemo(c) {
		return "demo (offline)"
	}
	return strings.TrimSpace(c.Model)
}

// connName is role-<pid>@<host>: which process a NATS connection, or a
// lease holder, is.
func connName(role string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s-%d@%s", role, os.Getpid(), host)
}
