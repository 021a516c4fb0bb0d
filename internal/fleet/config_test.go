package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
)

func TestSandboxProcessesFromEnv(t *testing.T) {
	for _, tc := range []struct {
		slots, procs string
		workers      int
		want         int
		err          string
	}{
		{slots: "8", workers: 1, want: 8},
		{slots: "8", workers: 3, want: 24},
		{slots: "500", workers: 1, want: SandboxProcessesDefaultMax},
		{slots: "500", procs: "200", workers: 1, want: 200},
		{slots: "8", procs: "-1", err: "AGENTFLEET_SANDBOX_PROCESSES must not be negative"},
		{slots: "8", procs: "many", err: "AGENTFLEET_SANDBOX_PROCESSES"},
	} {
		t.Setenv("AGENTFLEET_WORKER_SLOTS", tc.slots)
		t.Setenv("AGENTFLEET_SANDBOX_PROCESSES", tc.procs)
		cfg, err := ConfigFromEnv()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, cfg.sandboxProcesses(tc.workers), "slots %s, processes %q, workers %d", tc.slots, tc.procs, tc.workers)
	}
}

func TestSandboxMemoryFromEnv(t *testing.T) {
	gib := int64(1 << 30)
	for _, tc := range []struct {
		env  string
		want int64
		err  string
	}{
		{env: "", want: 0}, // derived from the cgroup by the sandbox
		{env: "4GiB", want: 4 * gib},
		{env: "4Gi", want: 4 * gib},
		{env: "1.5GiB", want: 3 * gib / 2},
		{env: "6442450944", want: 6 * gib},
		{env: "8GB", want: 8e9},
		{env: " 2048MiB ", want: 2 * gib},
		{env: "512MiB", err: "AGENTFLEET_SANDBOX_MEMORY=536870912 bytes is less than one sandbox process can hold"},
		{env: "lots", err: `AGENTFLEET_SANDBOX_MEMORY="lots" is not a size`},
		{env: "4 parsecs", err: "is not a size"},
		{env: "-1GiB", err: "is not a size"},
		{env: "1e30", err: "is not a size"},
	} {
		t.Setenv("AGENTFLEET_SANDBOX_MEMORY", tc.env)
		cfg, err := ConfigFromEnv()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.env)
			continue
		}
		require.NoError(t, err, tc.env)
		require.Equal(t, tc.want, cfg.SandboxMemory, tc.env)
		require.Equal(t, tc.want, cfg.sandboxConfig(1).MemoryTotal, "the worker's sandbox gets it")
	}
}

func TestEventsMaxAgeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
		err  bool
	}{
		{env: "", want: 0}, // the bus default, 7 days
		{env: "24h", want: 24 * time.Hour},
		{env: "7d", want: 7 * 24 * time.Hour},
		{env: "90m", want: 90 * time.Minute},
		{env: "30s", err: true},
		{env: "0d", err: true},
		{env: "1.5d", err: true},
		{env: "-1d", err: true},
		{env: "a week", err: true},
	} {
		t.Setenv("AGENTFLEET_EVENTS_MAX_AGE", tc.env)
		cfg, err := ConfigFromEnv()
		if tc.err {
			require.ErrorContains(t, err, "AGENTFLEET_EVENTS_MAX_AGE", tc.env)
			continue
		}
		require.NoError(t, err, tc.env)
		require.Equal(t, tc.want, cfg.EventsMaxAge, tc.env)
	}
}

func TestDurationsFromEnv(t *testing.T) {
	read := func(c Config) map[string]time.Duration {
		return map[string]time.Duration{
			"AGENTFLEET_DRAIN_TIMEOUT":     c.DrainTimeout,
			"AGENTFLEET_ACK_WAIT":          c.AckWait,
			"AGENTFLEET_STRANDED_INTERVAL": c.StrandedInterval,
			"AGENTFLEET_STRANDED_AFTER":    c.StrandedAfter,
		}
	}
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{
		"AGENTFLEET_DRAIN_TIMEOUT": DrainTimeoutDefault, "AGENTFLEET_ACK_WAIT": 0,
		"AGENTFLEET_STRANDED_INTERVAL": 0, "AGENTFLEET_STRANDED_AFTER": 0,
	}, read(cfg), "unset: the defaults (zero: the component's own)")

	for _, tc := range []struct {
		name, env string
		want      time.Duration
		err       string
	}{
		{name: "AGENTFLEET_DRAIN_TIMEOUT", env: "0s", want: 0},
		{name: "AGENTFLEET_DRAIN_TIMEOUT", env: "-1s", err: `AGENTFLEET_DRAIN_TIMEOUT="-1s" must be a duration of at least 0s`},
		{name: "AGENTFLEET_ACK_WAIT", env: "5s", want: 5 * time.Second},
		{name: "AGENTFLEET_ACK_WAIT", env: "500ms", err: `AGENTFLEET_ACK_WAIT="500ms" must be a duration of at least 1s, like "30s"`},
		{name: "AGENTFLEET_STRANDED_INTERVAL", env: "2s", want: 2 * time.Second},
		{name: "AGENTFLEET_STRANDED_INTERVAL", env: "0s", err: `AGENTFLEET_STRANDED_INTERVAL="0s" must be a duration of at least 1s`},
		{name: "AGENTFLEET_STRANDED_AFTER", env: "10m", want: 10 * time.Minute},
		{name: "AGENTFLEET_STRANDED_AFTER", env: "soon", err: `AGENTFLEET_STRANDED_AFTER="soon" must be a duration of at least 1s, like "1m"`},
	} {
		t.Run(tc.name+"="+tc.env, func(t *testing.T) {
			t.Setenv(tc.name, tc.env)
			cfg, err := ConfigFromEnv()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, read(cfg)[tc.name])
		})
	}
}

func TestOpenBusNamesTheProcess(t *testing.T) {
	t.Setenv("AGENTFLEET_DATA_DIR", t.TempDir())
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, emb, err := OpenBus(ctx, cfg, "dispatcher", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer emb.Shutdown()
	defer b.Close()
	// The lease holder a takeover log names is this process.
	l, err := b.Lease(ctx, "scheduler", time.Second)
	require.NoError(t, err)
	defer l.Release()
	host, err := os.Hostname()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(l.Holder(), fmt.Sprintf("dispatcher-%d@%s/", os.Getpid(), host)), "holder %q", l.Holder())
}

// A dispatcher (and dev mode) and a worker serve their metrics on
// different default ports, so both run on one host; the variable sets
// either.
func TestMetricsListenFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env, dispatcher, worker, err string
	}{
		{env: "", dispatcher: "127.0.0.1:9463", worker: "127.0.0.1:9464"},
		{env: "0.0.0.0:9100", dispatcher: "0.0.0.0:9100", worker: "0.0.0.0:9100"},
		{env: "127.0.0.1:0", dispatcher: "127.0.0.1:0", worker: "127.0.0.1:0"},
		{env: "9463", err: `AGENTFLEET_METRICS_LISTEN="9463" must be host:port (unset: 127.0.0.1:9463 for a dispatcher or dev mode, 127.0.0.1:9464 for a worker`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("AGENTFLEET_METRICS_LISTEN", tc.env)
			cfg, err := ConfigFromEnv()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.dispatcher, cfg.dispatcherMetricsListen(), "dispatcher and dev mode")
			require.Equal(t, tc.worker, cfg.workerMetricsListen(), "worker")
		})
	}
}

func TestWebhookSettingsFromEnv(t *testing.T) {
	t.Setenv("AGENTFLEET_SECRETS_KEY", "c2hvcnQ=")
	_, err := ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_SECRETS_KEY decodes to 5 bytes")
	t.Setenv("AGENTFLEET_SECRETS_KEY", "")
	t.Setenv("AGENTFLEET_PUBLIC_URL", "agents.example.com")
	_, err = ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_PUBLIC_URL")
	t.Setenv("AGENTFLEET_PUBLIC_URL", "https://agents.example.com/")
	t.Setenv("AGENTFLEET_EGRESS_ALLOW", "10.0.0.0/8,billing.internal")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, "https://agents.example.com", cfg.PublicURL)
	sb := cfg.sandboxConfig(1)
	require.Equal(t, []string{"billing.internal"}, sb.Network.AllowHosts)
	require.Len(t, sb.Network.Allow, 1)
	require.False(t, sb.Network.DenyPrivate)
	t.Setenv("AGENTFLEET_EGRESS_PRIVATE", "deny")
	cfg, err = ConfigFromEnv()
	require.NoError(t, err)
	require.True(t, cfg.sandboxConfig(1).Network.DenyPrivate)
	require.True(t, cfg.egress().DenyPrivate, "for run callbacks too")
	t.Setenv("AGENTFLEET_EGRESS_PRIVATE", "no")
	_, err = ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_EGRESS_PRIVATE")
	t.Setenv("AGENTFLEET_EGRESS_PRIVATE", "")
	t.Setenv("AGENTFLEET_EGRESS_ALLOW", "ftp://nope")
	_, err = ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_EGRESS_ALLOW")
	t.Setenv("AGENTFLEET_EGRESS_ALLOW", "127.0.0.1,169.254.169.254")
	_, err = ConfigFromEnv()
	require.ErrorContains(t, err, `AGENTFLEET_EGRESS_ALLOW: egress allow-list entry "169.254.169.254" is a cloud metadata address, which nothing opens`)
}

func TestNATSAuthFilesFromEnv(t *testing.T) {
	dir := t.TempDir()
	creds, key := filepath.Join(dir, "fleet.creds"), filepath.Join(dir, "signing.nk")
	require.NoError(t, os.WriteFile(creds, []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte("x"), 0o600))
	t.Setenv("AGENTFLEET_NATS_CREDS", creds)
	t.Setenv("AGENTFLEET_NATS_SIGNING_KEY", key)
	c, err := ConfigFromEnv()
	require.NoError(t, err)
	require.Equal(t, creds, c.NATSCreds)
	require.Equal(t, key, c.NATSSigningKey)

	// A missing file is the process's startup error, naming the variable
	// (the deploy files name paths of the machines they run on).
	c.NATSCreds = filepath.Join(dir, "missing.creds")
	c.NATSURL = "nats://127.0.0.1:1"
	_, _, err = OpenBus(context.Background(), c, "worker", slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "AGENTFLEET_NATS_CREDS")
	require.ErrorContains(t, err, "agentctl nats-auth")
}

func TestNATSClusterFromEnv(t *testing.T) {
	ca := t.TempDir() + "/ca.pem"
	require.NoError(t, os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600))
	for _, tc := range []struct {
		env  map[string]string
		want int
		err  string
	}{
		{env: map[string]string{}, want: 1},
		{env: map[string]string{"AGENTFLEET_NATS_REPLICAS": "3"}, want: 3},
		{env: map[string]string{"AGENTFLEET_NATS_REPLICAS": "7"}, err: "AGENTFLEET_NATS_REPLICAS=7 must be 1 to 5"},
		{env: map[string]string{"AGENTFLEET_NATS_REPLICAS": "three"}, err: `AGENTFLEET_NATS_REPLICAS="three" is not a whole number`},
		{env: map[string]string{"AGENTFLEET_NATS_TLS_CA": ca}, want: 1},
		{env: map[string]string{"AGENTFLEET_NATS_TLS_CA": ca + ".missing"}, err: "AGENTFLEET_NATS_TLS_CA"},
		{env: map[string]string{"AGENTFLEET_NATS_TLS_CERT": ca}, err: "AGENTFLEET_NATS_TLS_CERT and AGENTFLEET_NATS_TLS_KEY go together"},
	} {
		for _, k := range []string{"AGENTFLEET_NATS_REPLICAS", "AGENTFLEET_NATS_TLS_CA", "AGENTFLEET_NATS_TLS_CERT", "AGENTFLEET_NATS_TLS_KEY"} {
			t.Setenv(k, tc.env[k])
		}
		cfg, err := ConfigFromEnv()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%v", tc.env)
			continue
		}
		require.NoError(t, err, "%v", tc.env)
		require.Equal(t, tc.want, cfg.NATSReplicas)
	}
}

func TestNATSTenantConsumersFromEnv(t *testing.T) {
	for v, want := range map[string]string{"": "", "1": "", "64": "", "0": "AGENTFLEET_NATS_TENANT_CONSUMERS=0", "-1": "must be 1 to 10000",
		"20000": "must be 1 to 10000", "many": `AGENTFLEET_NATS_TENANT_CONSUMERS="many" is not a whole number`} {
		t.Setenv("AGENTFLEET_NATS_TENANT_CONSUMERS", v)
		cfg, err := ConfigFromEnv()
		if want != "" {
			require.ErrorContains(t, err, want, v)
			continue
		}
		require.NoError(t, err, v)
		if v == "" {
			require.Equal(t, bus.TenantConsumersDefault, cfg.NATSTenantConsumers)
		}
	}
}
