// Command worker executes turns: it pulls them from NATS one per free
// slot, runs each (one model call, then the script in a sandbox process),
// commits it to the store and publishes the next. It keeps no state
// between turns; run as many as the load needs.
//
// Configuration is the environment of DESIGN §8: AGENTFLEET_NATS_URL
// (required), AGENTFLEET_DATABASE_URL (unset: SQLite in
// AGENTFLEET_DATA_DIR, for a single-host fleet), AGENTFLEET_WORKER_SLOTS,
// AGENTFLEET_METRICS_LISTEN, AGENTFLEET_MODEL, OPENAI_BASE_URL,
// OPENAI_API_KEY.
//
// SIGTERM drains: the worker stops pulling, lets in-flight turns finish
// within AGENTFLEET_DRAIN_TIMEOUT (default 30s), hands back the rest, and
// exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentfleet/agentfleet/internal/fleet"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	cfg, err := fleet.ConfigFromEnv()
	if err != nil {
		return err
	}
	if cfg.NATSURL == "" {
		return errors.New("AGENTFLEET_NATS_URL is not set: a worker joins a fleet's NATS server (for everything in one process, use agentctl dev)")
	}
	// Setup may be interrupted; the turn loop is stopped by a drain,
	// not by the signal directly.
	setupCtx, stopSetup := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSetup()
	st, err := fleet.OpenStore(setupCtx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	b, _, err := fleet.OpenBus(setupCtx, cfg, logger)
	if err != nil {
		return err
	}
	defer b.Close()
	reg := fleet.NewRegistry()
	wp, err := fleet.NewWorkerProcess(fleet.WorkerConfig{
		Workers: 1, Slots: cfg.WorkerSlots, Model: cfg.Model, Store: st, Bus: b, Registry: reg, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer wp.Close()

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	metricsErr := make(chan error, 1)
	go func() { metricsErr <- fleet.ServeMetrics(runCtx, cfg.MetricsListen, reg, logger, nil) }()
	done := make(chan error, 1)
	go func() { done <- wp.Run(runCtx) }()
	logger.Info("worker running", "slots", cfg.WorkerSlots, "model", fleet.ModelName(cfg.Model))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
		logger.Info("draining", "timeout", cfg.DrainTimeout)
		dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
		_ = wp.Shutdown(dctx)
		cancel()
		stopRun()
		err = <-done
	case err = <-done:
		stopRun()
	case err = <-metricsErr:
		stopRun()
		<-done
	}
	return err
}
