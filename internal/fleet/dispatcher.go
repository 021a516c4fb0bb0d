package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/console"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/scheduler"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Listen string
	// MetricsListen, when set, is where the registry's /metrics is
	// served (port 0: any free port); the API port never serves it.
	MetricsListen string
	AdminToken    string
	ReadyDepth    int
	Store         store.Store
	Bus           *bus.Bus
	Registry      *prometheus.Registry
	Logger        *slog.Logger
	// Elect runs the scheduler under a NATS lease, for several
	// dispatchers on one fleet.
	Elect bool
	// KeeperInterval overrides the budget keeper's pass interval.
	KeeperInterval time.Duration
	// StrandedInterval and StrandedAfter override how often the
	// dispatcher sweeps for runs due a turn that have no turn message in
	// NATS (a submission recorded but never queued, a running run whose
	// message was lost), and how long such a run must have been
	// unchanged (maintain.StrandedIntervalDefault,
	// maintain.StrandedAfterDefault).
	StrandedInterval time.Duration
	StrandedAfter    time.Duration
	// BatchMaxBytes caps a POST /v1/batches body (zero:
	// api.BatchMaxBytesDefault); BatchSweepInterval is how often batches
	// are swept and their progress published (zero:
	// maintain.BatchSweepIntervalDefault).
	BatchMaxBytes      int64
	BatchSweepInterval time.Duration
	// Tracer traces admissions; nil means one from the standard
	// OpenTelemetry environment (off unless it asks).
	Tracer *telemetry.Tracer
	// BudgetMetrics, when set, is shared with a worker process on the
	// same registry (dev mode); otherwise they are registered here.
	BudgetMetrics *budget.Metrics
	// Secrets seals webhook trigger secrets (nil: triggers cannot be
	// created); PublicURL makes their hook URLs absolute.
	Secrets   *secrets.Box
	PublicURL string
	// Egress is the network guard run callbacks dial through;
	// CallbackInterval and CallbackBackoff override how often the
	// callback outbox is drained and the retry schedule's unit
	// (maintain.CallbackIntervalDefault, maintain.CallbackBackoffDefault).
	Egress           egress.Config
	CallbackInterval time.Duration
	CallbackBackoff  time.Duration
	// ApprovalSweepInterval overrides how often approvals are expired
	// and notified (maintain.ApprovalSweepIntervalDefault).
	ApprovalSweepInterval time.Duration
	// Retention is how long ended runs are kept before they are deleted
	// with their trace (AGENTFLEET_RETENTION); zero keeps them all. The
	// sweep runs where the scheduler leads. RetentionInterval is how
	// often it looks, RetentionBatch the most runs one transaction
	// deletes, RetentionPause the least pause between two (zero:
	// maintain.RetentionIntervalDefault, RetentionBatchDefault,
	// RetentionPauseDefault).
	Retention         time.Duration
	RetentionInterval time.Duration
	RetentionBatch    int
	RetentionPause    time.Duration
	// NATSCreds issues tenants' NATS subscriber creds (nil: the
	// endpoints answer 503).
	NATSCreds api.NATSCreds
	// TenantStreams caps each tenant's concurrent event streams and
	// ?wait polls (AGENTFLEET_TENANT_STREAMS; zero: api.TenantStreamsDefault).
	TenantStreams int
	// FleetSampleEvery is how often the fleet's slots and queue depth
	// are sampled for the console (zero: FleetSampleEveryDefault).
	FleetSampleEvery time.Duration
}

// Dispatcher is the dispatcher process's work: the HTTP API, the fair
// scheduler, the budget keeper, the maintenance services
// (internal/maintain) and, on a listener apart from the API's, the
// metrics.
type Dispatcher struct {
	cfg      DispatcherConfig
	listener net.Listener
	server   *http.Server
	metrics  *metricsServer // nil without MetricsListen
	api      *api.Server
	sched    *scheduler.Scheduler
	// services are everything but the API that Run runs: the
	// scheduler, the keeper, the sweeps, the metrics listener.
	services []maintain.Service
	// tracer is shut down by Run when the dispatcher made it.
	tracer    *telemetry.Tracer
	ownTracer bool
}

// NewDispatcher binds the listeners (so URL and MetricsURL are known at
// once) and builds the parts; Run serves.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.StrandedInterval < 0 || cfg.StrandedAfter < 0 {
		return nil, errors.New("fleet: StrandedInterval and StrandedAfter must not be negative (zero selects the default)")
	}
	if cfg.Retention < 0 || cfg.RetentionInterval < 0 || cfg.RetentionBatch < 0 || cfg.RetentionPause < 0 {
		return nil, errors.New("fleet: Retention, RetentionInterval, RetentionBatch and RetentionPause must not be negative (zero: keep every run, and the defaults)")
	}
	if cfg.RetentionBatch > store.RunDeleteEndedLimitMax {
		return nil, fmt.Errorf("fleet: RetentionBatch %d is over the store's limit of %d runs per transaction", cfg.RetentionBatch, store.RunDeleteEndedLimitMax)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	bm := cfg.BudgetMetrics
	if bm == nil {
		bm = budget.NewMetrics(cfg.Registry)
	}
	d := &Dispatcher{cfg: cfg, tracer: cfg.Tracer}
	if d.tracer == nil {
		var err error
		if d.tracer, err = telemetry.FromEnv(context.Background(), "agentfleet-dispatcher"); err != nil {
			return nil, err
		}
		d.ownTracer = true
	}
	keeper, err := budget.NewKeeper(budget.KeeperConfig{
		Store: cfg.Store, Metrics: bm, Logger: cfg.Logger, Interval: cfg.KeeperInterval,
		Resume: func(ctx context.Context, run agentfleet.Run) error {
			return outbox.Outbox{Bus: cfg.Bus}.Resumed(ctx, run)
		},
	})
	if err != nil {
		return nil, err
	}
	lease := time.Duration(0)
	if cfg.Elect {
		lease = scheduler.LeaseTTLDefault
	}
	d.sched, err = scheduler.New(scheduler.Config{
		Bus: cfg.Bus, Store: cfg.Store, ReadyDepth: cfg.ReadyDepth, LeaseTTL: lease,
		Logger: cfg.Logger, Metrics: scheduler.NewMetrics(cfg.Registry),
	})
	if err != nil {
		return nil, err
	}
	deleted, err := newRunsDeleted(cfg.Registry)
	if err != nil {
		return nil, err
	}
	stranded, err := maintain.NewStranded(maintain.StrandedConfig{Store: cfg.Store, Bus: cfg.Bus,
		Interval: cfg.StrandedInterval, After: cfg.StrandedAfter, Registerer: cfg.Registry, Admitted: d.tracer.Admitted, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	sampler := newFleetSampler(cfg.Bus, cfg.FleetSampleEvery, cfg.Logger)
	srv, err := api.New(api.Config{
		Store: cfg.Store, Bus: cfg.Bus, AdminToken: cfg.AdminToken, Registerer: cfg.Registry, Logger: cfg.Logger,
		TenantChanged: func(string) { keeper.Kick() },
		Secrets:       cfg.Secrets, PublicURL: cfg.PublicURL,
		Egress: cfg.Egress, RequeueWithin: stranded.Within,
		RunsDeleted: deleted.WithLabelValues("api"), BatchMaxBytes: cfg.BatchMaxBytes,
		// Keys revoked on any dispatcher leave every one's cache.
		KeyRevocations: cfg.Bus,
		Console:        console.Handler(),
		Tracer:         d.tracer,
		NATSCreds:      cfg.NATSCreds,
		TenantStreams:  cfg.TenantStreams,
		FleetSamples:   sampler,
	})
	if err != nil {
		return nil, err
	}
	if err := d.maintenance(srv, keeper, stranded, deleted); err != nil {
		srv.Close()
		return nil, err
	}
	d.services = append(d.services, sampler)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("listen on %s (AGENTFLEET_LISTEN): %w", cfg.Listen, err)
	}
	if cfg.MetricsListen != "" {
		if d.metrics, err = listenMetrics(cfg.MetricsListen, cfg.Registry, cfg.Logger); err != nil {
			ln.Close()
			return nil, err
		}
	}
	d.listener = ln
	d.api = srv
	d.server = srv.HTTPServer()
	return d, nil
}

// URL is the API's base URL.
func (d *Dispatcher) URL() string { return "http://" + d.listener.Addr().String() }

// MetricsURL is the address of the dispatcher's /metrics, or "" when
// it serves none.
func (d *Dispatcher) MetricsURL() string {
	if d.metrics == nil {
		return ""
	}
	return d.metrics.URL()
}

// maintenance assembles the services Run runs beside the API.
func (d *Dispatcher) maintenance(srv *api.Server, keeper *budget.Keeper, stranded *maintain.Stranded, deleted *prometheus.CounterVec) error {
	cfg := d.cfg
	leading := maintain.Leading(d.sched.Leading)
	signer := maintain.NewSigner(cfg.Store, cfg.Secrets, cfg.Egress, cfg.CallbackBackoff)
	callbacks, err := maintain.NewCallbacks(maintain.CallbacksConfig{Store: cfg.Store, Signer: signer,
		Interval: cfg.CallbackInterval, Registerer: cfg.Registry, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	d.services = []maintain.Service{
		maintain.Func(d.sched.Run), maintain.Func(keeper.Run), stranded, callbacks,
		maintain.NewChildren(maintain.ChildrenConfig{Store: cfg.Store, Bus: cfg.Bus, Leading: leading, Logger: cfg.Logger}),
		maintain.NewBatches(maintain.BatchesConfig{Store: cfg.Store, Bus: cfg.Bus, Signer: signer,
			Interval: cfg.BatchSweepInterval, Leading: leading, Logger: cfg.Logger}),
		maintain.NewApprovals(maintain.ApprovalsConfig{Store: cfg.Store, Bus: cfg.Bus, Signer: signer,
			View: api.ApprovalView, Decisions: srv.ApprovalDecisions(),
			Interval: cfg.ApprovalSweepInterval, Leading: leading, Logger: cfg.Logger}),
	}
	if cfg.Retention > 0 {
		d.services = append(d.services, maintain.NewRetention(maintain.RetentionConfig{Store: cfg.Store, Age: cfg.Retention,
			Interval: cfg.RetentionInterval, Batch: cfg.RetentionBatch, Pause: cfg.RetentionPause,
			Leading: leading, Deleted: deleted.WithLabelValues("retention"), Logger: cfg.Logger}))
	}
	return nil
}

// Run serves until ctx ends, then shuts the HTTP server down gracefully
// (open event streams are cut after a few seconds) and waits for the
// services to stop.
func (d *Dispatcher) Run(ctx context.Context) error {
	services := d.services
	if d.metrics != nil {
		services = append(services[:len(services):len(services)], maintain.Func(d.metrics.serve))
	}
	done := make(chan error, 1)
	go func() { done <- maintain.Run(ctx, services...) }()
	serveErr := make(chan error, 1)
	go func() {
		if err := d.server.Serve(d.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("serve API: %w", err)
			return
		}
		serveErr <- nil
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.server.Shutdown(sctx); err != nil {
		_ = d.server.Close()
	}
	all := []error{<-serveErr, <-done}
	d.api.Close()
	if d.ownTracer {
		// A context of its own: the HTTP shutdown may have spent sctx
		// waiting for streams, and an expired flush leaves the span
		// processor running.
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer tcancel()
		if err := d.tracer.Shutdown(tctx); err != nil {
			all = append(all, fmt.Errorf("flush traces: %w", err))
		}
	}
	return errors.Join(all...)
}
