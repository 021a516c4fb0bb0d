package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// RunDispatcher is the dispatcher process: it opens the store and the bus
// cfg names, then serves the API, the fair scheduler (under the NATS
// lease, so several dispatchers can share a fleet), the budget keeper and
// its metrics (on cfg.MetricsListen, by default
// DispatcherMetricsListenDefault) until ctx ends. cmd/dispatcher and `agentctl __serve dispatcher` (the
// processes `agentctl bench` spawns) are this function.
func RunDispatcher(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if cfg.AdminToken == "" {
		logger.Warn("AGENTFLEET_ADMIN_TOKEN is not set: tenant administration is disabled")
	}
	if cfg.SecretsKey == "" {
		logger.Warn("AGENTFLEET_SECRETS_KEY is not set: creating webhook triggers is refused (set it to the output of: openssl rand -base64 32)")
	}
	st, err := OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := cfg.prepareEmbeddedNATSAuth(); err != nil {
		return err
	}
	b, emb, err := OpenBus(ctx, cfg, "dispatcher", logger)
	if err != nil {
		return err
	}
	defer func() {
		_ = b.Close()
		if emb != nil {
			emb.Shutdown()
		}
	}()
	natsCreds, err := newNATSCreds(cfg, b, emb)
	if err != nil {
		return err
	}
	d, err := NewDispatcher(DispatcherConfig{
		Listen: cfg.Listen, MetricsListen: cfg.dispatcherMetricsListen(), AdminToken: cfg.AdminToken, ReadyDepth: cfg.ReadyDepth,
		StrandedInterval: cfg.StrandedInterval, StrandedAfter: cfg.StrandedAfter, BatchMaxBytes: cfg.BatchMaxBytes,
		Retention: cfg.Retention, RetentionInterval: cfg.RetentionInterval,
		Store: st, Bus: b, Logger: logger, Elect: true,
		Secrets: cfg.secretsBox(), PublicURL: cfg.PublicURL, Egress: cfg.egress(), NATSCreds: natsCreds,
		TenantStreams: cfg.TenantStreams,
	})
	if err != nil {
		return err
	}
	logger.Info("dispatcher listening", "url", d.URL(), "metrics", d.MetricsURL())
	return d.Run(ctx)
}

// WorkerGCPercent is the garbage collector's target (GOGC) in a worker
// process unless the environment sets GOGC. A worker's live heap is
// small, its in-flight turns (about 180 KiB each), and it allocates fast
// (HTTP and JSON for the model, pgx, NATS): at Go's default of 100 the
// collector took an eighth of the worker's CPU. At 400 it runs a quarter
// as often for about 15 MiB more at 64 slots (production bench: worker CPU
// per turn 462-480 -> 398-412 us, peak RSS 62 -> 77 MiB). A worker with
// thousands of slots should run with GOMEMLIMIT (or GOGC) set: the limit
// makes the collector work harder as the heap nears it, whatever GOGC.
const WorkerGCPercent = 400

// RunWorker is the worker process: it joins the fleet's NATS server
// (cfg.NATSURL is required) and store, serves /metrics and /healthz on
// cfg.MetricsListen (by default WorkerMetricsListenDefault), and executes
// turns. The end of ctx (SIGTERM, in
// cmd/worker) does not abandon the turns in flight, it drains: the worker
// stops pulling, lets them finish within cfg.DrainTimeout, hands back the
// rest and returns nil. During setup the end of ctx aborts at once. A
// worker that must stop as a crash would is killed (SIGKILL).
// cmd/worker and `agentctl __serve worker` are this function.
func RunWorker(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if cfg.NATSURL == "" {
		return errors.New("AGENTFLEET_NATS_URL is not set: a worker joins a fleet's NATS server (for everything in one process, use agentctl dev)")
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(WorkerGCPercent)
	}
	st, err := OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := cfg.prepareEmbeddedNATSAuth(); err != nil {
		return err
	}
	b, _, err := OpenBus(ctx, cfg, "worker", logger)
	if err != nil {
		return err
	}
	defer b.Close()
	reg := NewRegistry()
	wp, err := NewWorkerProcess(WorkerConfig{
		Workers: 1, Slots: cfg.WorkerSlots, Model: cfg.Model, Store: st, Bus: b, Registry: reg, Logger: logger,
		Sandbox: cfg.sandboxConfig(1), Secrets: cfg.secretsBox(),
	})
	if err != nil {
		return err
	}
	defer wp.Close()
	metrics, err := listenMetrics(cfg.workerMetricsListen(), reg, logger)
	if err != nil {
		return err
	}

	// The turn loop runs on its own context: ctx starts a drain, and
	// only the drain's end stops it.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	metricsErr := make(chan error, 1)
	go func() { metricsErr <- metrics.serve(runCtx) }()
	done := make(chan error, 1)
	go func() { done <- wp.Run(runCtx) }()
	logger.Info("worker running", "slots", cfg.WorkerSlots, "model", ModelName(cfg.Model))

	metricsDone := false
	select {
	case <-ctx.Done():
		logger.Info("draining", "timeout", cfg.DrainTimeout)
		dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
		_ = wp.Shutdown(dctx)
		cancel()
		stopRun()
		err = <-done
	case err = <-done:
		stopRun()
	case err = <-metricsErr:
		metricsDone = true
		stopRun()
		<-done
	}
	if !metricsDone {
		// The metrics server shuts down with runCtx.
		if merr := <-metricsErr; err == nil {
			err = merr
		}
	}
	return err
}

// Main is a fleet process's main function: run (RunDispatcher or
// RunWorker), configured by the environment, until SIGINT or SIGTERM,
// which interrupt setup or, once running, stop it (a worker drains). An
// error is printed after the command's name and exits with status 1.
func Main(name string, run func(context.Context, Config, *slog.Logger) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := ConfigFromEnv()
	if err == nil {
		err = run(ctx, cfg, logger)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		stop()
		os.Exit(1)
	}
}
