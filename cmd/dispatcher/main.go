// Command dispatcher serves agentfleet's HTTP API, runs the fair scheduler
// and the budget keeper. It admits and publishes runs; it never calls a
// model. Run any number of them against one NATS server and one Postgres;
// a NATS lease picks the one that schedules.
//
// Configuration is the environment of DESIGN §8: AGENTFLEET_LISTEN,
// AGENTFLEET_ADMIN_TOKEN, AGENTFLEET_DATABASE_URL, AGENTFLEET_NATS_URL
// (unset: an embedded NATS server listening on AGENTFLEET_NATS_LISTEN, for
// a single-host fleet), AGENTFLEET_DATA_DIR.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentfleet/agentfleet/internal/fleet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, logger); err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := fleet.ConfigFromEnv()
	if err != nil {
		return err
	}
	if cfg.AdminToken == "" {
		logger.Warn("AGENTFLEET_ADMIN_TOKEN is not set: tenant administration is disabled")
	}
	st, err := fleet.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	b, emb, err := fleet.OpenBus(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() {
		_ = b.Close()
		if emb != nil {
			emb.Shutdown()
		}
	}()
	d, err := fleet.NewDispatcher(fleet.DispatcherConfig{
		Listen: cfg.Listen, AdminToken: cfg.AdminToken, ReadyDepth: cfg.ReadyDepth,
		Store: st, Bus: b, Logger: logger, Elect: true,
	})
	if err != nil {
		return err
	}
	logger.Info("dispatcher listening", "url", d.URL())
	return d.Run(ctx)
}
