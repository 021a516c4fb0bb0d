package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
)

// DevTenant is the tenant dev mode prepares, with a key ready to use.
const DevTenant = "dev"

// Dev is the whole fleet in one process: embedded NATS, SQLite, the
// dispatcher and in-process workers.
type Dev struct {
	Config     Config
	Store      store.Store
	Bus        *bus.Bus
	Embedded   *bus.Embedded
	Dispatcher *Dispatcher
	Workers    *WorkerProcess
	AdminToken string
	// TenantKey is an API key of DevTenant.
	TenantKey string
	// TenantNATSCreds is a creds file DevTenant's own NATS subscribers
	// can use (24h), "" when the fleet issues none.
	TenantNATSCreds string
	log             *slog.Logger
}

// DevOptions adjusts dev mode for tests and benchmarks.
type DevOptions struct {
	// ModelClient replaces the configured model.
	ModelClient llm.Client
	Logger      *slog.Logger
}

// StartDev opens everything dev mode needs; Run serves it.
func StartDev(ctx context.Context, cfg Config, opts DevOptions) (d *Dev, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.DatabaseURL != "" || cfg.NATSURL != "" {
		log.Info("dev mode with external services", "postgres", cfg.DatabaseURL != "", "nats", cfg.NATSURL != "")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	d = &Dev{Config: cfg, log: log}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.AdminToken, err = secretFile(cfg.AdminToken, filepath.Join(cfg.DataDir, "admin-token"), api.NewAPIKey); err != nil {
		return nil, err
	}
	// Dev mode keeps a secrets key of its own, so triggers work at once.
	if cfg.SecretsKey, err = secretFile(cfg.SecretsKey, filepath.Join(cfg.DataDir, "secrets-key"), secrets.NewKey); err != nil {
		return nil, err
	}
	if _, err := secrets.ParseKey(cfg.SecretsKey); err != nil {
		return nil, fmt.Errorf("%s/secrets-key: %w", cfg.DataDir, err)
	}
	if err := cfg.prepareEmbeddedNATSAuth(); err != nil {
		return nil, err
	}
	d.Config = cfg
	if d.Store, err = OpenStore(ctx, cfg); err != nil {
		return nil, err
	}
	if d.Bus, d.Embedded, err = OpenBus(ctx, cfg, "dev", log); err != nil {
		return nil, err
	}
	if d.TenantKey, err = ensureDevTenant(ctx, d.Store, filepath.Join(cfg.DataDir, "dev-tenant-key")); err != nil {
		return nil, err
	}
	natsCreds, err := newNATSCreds(cfg, d.Bus, d.Embedded)
	if err != nil {
		return nil, err
	}
	if natsCreds != nil && cfg.natsAuthDir != "" {
		creds, err := natsCreds.TenantCreds(ctx, DevTenant, 0)
		if err != nil {
			return nil, err
		}
		d.TenantNATSCreds = filepath.Join(cfg.natsAuthDir, DevTenant+".creds")
		if err := os.WriteFile(d.TenantNATSCreds, creds, 0o600); err != nil {
			return nil, err
		}
	}
	reg := NewRegistry()
	bm := budget.NewMetrics(reg)
	d.Dispatcher, err = NewDispatcher(DispatcherConfig{
		Listen: cfg.Listen, MetricsListen: cfg.dispatcherMetricsListen(), AdminToken: d.AdminToken, ReadyDepth: cfg.ReadyDepth,
		StrandedInterval: cfg.StrandedInterval, StrandedAfter: cfg.StrandedAfter, BatchMaxBytes: cfg.BatchMaxBytes,
		Retention: cfg.Retention, RetentionInterval: cfg.RetentionInterval,
		Store: d.Store, Bus: d.Bus, Registry: reg, Logger: log, BudgetMetrics: bm,
		Secrets: cfg.secretsBox(), PublicURL: cfg.PublicURL, Egress: cfg.egress(), NATSCreds: natsCreds,
		TenantStreams: cfg.TenantStreams,
	})
	if err != nil {
		return nil, err
	}
	d.Workers, err = NewWorkerProcess(WorkerConfig{
		Workers: cfg.Workers, Slots: cfg.WorkerSlots, Model: cfg.Model, ModelClient: opts.ModelClient,
		Sandbox: cfg.sandboxConfig(cfg.Workers),
		Store:   d.Store, Bus: d.Bus, Registry: reg, Logger: log, BudgetMetrics: bm, Secrets: cfg.secretsBox(),
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// URL is the API's base URL.
func (d *Dev) URL() string { return d.Dispatcher.URL() }

// MetricsURL is where the process's metrics, the dispatcher's and the
// workers' on one registry, are served.
func (d *Dev) MetricsURL() string { return d.Dispatcher.MetricsURL() }

// Run serves until ctx ends, then drains the workers (within the drain
// timeout) and closes everything.
func (d *Dev) Run(ctx context.Context) error {
	defer d.close()
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	var derr, werr error
	wg.Add(2)
	go func() { defer wg.Done(); derr = d.Dispatcher.Run(ctx) }()
	go func() { defer wg.Done(); werr = d.Workers.Run(workCtx) }()
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), d.Config.DrainTimeout)
	_ = d.Workers.Shutdown(dctx)
	cancel()
	stopWork()
	wg.Wait()
	return errors.Join(derr, werr)
}

func (d *Dev) close() {
	if d.Workers != nil {
		_ = d.Workers.Close()
	}
	if d.Bus != nil {
		_ = d.Bus.Close()
	}
	if d.Embedded != nil {
		d.Embedded.Shutdown()
	}
	if d.Store != nil {
		_ = d.Store.Close()
	}
}

// secretFile returns value when set; otherwise the token kept in path,
// generated by gen on first use (mode 0600).
func secretFile(value, path string, gen func() string) (string, error) {
	if value != "" {
		return value, nil
	}
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	tok := gen()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tok, nil
}

// ensureDevTenant makes sure the dev tenant exists and that keyPath holds
// one of its keys (keys are stored hashed, so the file is the only copy).
func ensureDevTenant(ctx context.Context, st store.Store, keyPath string) (string, error) {
	if b, err := os.ReadFile(keyPath); err == nil {
		key := strings.TrimSpace(string(b))
		if res, err := st.TenantGetByAPIKey(ctx, store.TenantGetByAPIKeyParams{Key: key}); err == nil && res.Tenant.ID == DevTenant {
			return key, nil
		}
	}
	_, err := st.TenantGetByID(ctx, DevTenant)
	var key string
	switch {
	case errors.Is(err, store.ErrNotFound):
		key, err = api.CreateTenant(ctx, st, store.TenantCreateParams{
			ID: DevTenant, Window: agentfleet.WindowDay, Weight: 1, Exhausted: agentfleet.ExhaustedQueue,
		})
		if err != nil {
			return "", fmt.Errorf("create dev tenant: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("look up dev tenant: %w", err)
	default:
		key = api.NewAPIKey()
		if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{Tenant: DevTenant, Key: key, Name: "dev"}); err != nil {
			return "", fmt.Errorf("create dev tenant key: %w", err)
		}
	}
	if err := os.WriteFile(keyPath, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", keyPath, err)
	}
	return key, nil
}
