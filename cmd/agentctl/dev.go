package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// demoTasks are what `agentctl dev --demo` submits: tasks the offline demo
// model has scripts for, spread over two tenants.
var demoTasks = []struct{ tenant, message string }{
	{"demo-a", "List the prime numbers below 50"},
	{"demo-b", "Compute the first 15 Fibonacci numbers"},
	{"demo-a", "Play fizzbuzz up to 15"},
	{"demo-b", "Count the words in: the quick brown fox jumps over the lazy dog the end"},
}

func (e cliEnv) devCmd() *cobra.Command {
	return long(leaf("dev [flags]", "Run the whole fleet in this process: API, console, NATS, store, workers",
		"agentctl dev\nagentctl dev --demo\nAGENTFLEET_MODEL=gpt-4o-mini OPENAI_API_KEY=sk-... agentctl dev",
		func(fs *pflag.FlagSet) runFunc {
			demo := fs.Bool("demo", false, "also submit a few demo runs across two tenants and stream them")
			return func(ctx context.Context, _ []string) error { return e.dev(ctx, *demo) }
		}), `Runs the dispatcher (API and console), an embedded NATS server, the store
(SQLite in AGENTFLEET_DATA_DIR, or AGENTFLEET_DATABASE_URL) and
AGENTFLEET_WORKERS workers in this process, with a dev tenant and its key,
until Ctrl-C. The model is AGENTFLEET_MODEL at OPENAI_BASE_URL, or the
offline demo model.`)
}

func (e cliEnv) dev(ctx context.Context, demo bool) error {
	cfg, err := fleet.ConfigFromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dev, err := fleet.StartDev(ctx, cfg, fleet.DevOptions{Logger: logger})
	if err != nil {
		return err
	}
	model := cfg.Model.Model
	if llm.IsDemo(cfg.Model) {
		model = llm.DemoModelLabel + " — set AGENTFLEET_MODEL and OPENAI_BASE_URL for a real model"
	}
	nats := "in-process only"
	if dev.Embedded != nil && dev.Embedded.Listen() != "" && dev.TenantNATSCreds != "" {
		nats = fmt.Sprintf("nats://%s, authenticated; the dev tenant's events:\n"+
			"               nats sub -s nats://%s --creds %s 'af.events.%s.>'", dev.Embedded.Listen(), dev.Embedded.Listen(), dev.TenantNATSCreds, fleet.DevTenant)
	} else if dev.Embedded != nil && dev.Embedded.Listen() != "" {
		nats = "nats://" + dev.Embedded.Listen() + "  (try: nats sub 'af.events.>')"
	} else if cfg.NATSURL != "" {
		nats = cfg.NATSURL
	}
	storeDesc := cfg.SQLitePath()
	if cfg.DatabaseURL != "" {
		storeDesc = "postgres"
	}
	fmt.Fprintf(e.stdout, `agentfleet dev is running
  API          %s
  console      %s/ (sign in with the tenant key or the admin token)
  metrics      %s
  admin token  %s
  tenant       %s, API key %s
  model        %s
  NATS         %s
  store        %s
  workers      %d x %d slots

Try it in another terminal:
  export AGENTFLEET_URL=%s AGENTFLEET_TOKEN=%s
  agentctl run --wait "List the prime numbers below 50"

Press Ctrl-C to stop.
`, dev.URL(), dev.URL(), dev.MetricsURL(), dev.AdminToken, fleet.DevTenant, dev.TenantKey, model, nats, storeDesc,
		cfg.Workers, cfg.WorkerSlots, dev.URL(), dev.TenantKey)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var demoErr error
	if demo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			demoErr = e.runDemo(runCtx, dev)
		}()
	}
	err = dev.Run(ctx)
	stop()
	wg.Wait()
	if demoErr != nil && !errors.Is(demoErr, context.Canceled) {
		fmt.Fprintf(e.stderr, "demo: %v\n", demoErr)
	}
	return err
}

// runDemo submits the demo tasks through the API, as a user would, and
// streams every run's events, prefixed by tenant and run.
func (e cliEnv) runDemo(ctx context.Context, dev *fleet.Dev) error {
	keys := map[string]string{}
	for _, t := range []string{"demo-a", "demo-b"} {
		key, err := demoTenantKey(ctx, dev.Store, t)
		if err != nil {
			return err
		}
		keys[t] = key
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, task := range demoTasks {
		c := client.New(dev.URL(), keys[task.tenant])
		run, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: task.message})
		if err != nil {
			return fmt.Errorf("submit demo run: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Events(ctx, run.ID, 0, func(ev agentfleet.Event) error {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(e.stdout, "[%s %s] ", task.tenant, run.ID[len(run.ID)-6:])
				printEvent(e.stdout, ev)
				return nil
			})
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		fmt.Fprintln(e.stdout, "demo runs finished; the fleet keeps running (Ctrl-C to stop)")
	}
	return nil
}

// demoTenantKey creates a demo tenant if needed and mints it a key.
func demoTenantKey(ctx context.Context, st store.Store, tenant string) (string, error) {
	_, err := st.TenantGetByID(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return api.CreateTenant(ctx, st, store.TenantCreateParams{ID: tenant, Window: agentfleet.WindowDay, Weight: 1, Exhausted: agentfleet.ExhaustedQueue})
	}
	if err != nil {
		return "", err
	}
	key := api.NewAPIKey()
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{Tenant: tenant, Key: key, Name: "demo"}); err != nil {
		return "", err
	}
	return key, nil
}
