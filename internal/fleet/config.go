// Package fleet assembles agentfleet's processes from their parts: the
// dispatcher (HTTP API, fair scheduler, budget keeper, retention sweep),
// the worker (turn executors, sandbox pool, model client, metrics
// endpoint), and dev mode, which runs both on an embedded NATS server and
// SQLite in one process.
// cmd/dispatcher, cmd/worker and `agentctl dev` are thin wrappers around
// it, and the end-to-end tests boot the same assemblies on port 0.
//
// Configuration comes from the environment docs/configuration.md lists; ConfigFromEnv
// reads it and Validate says how to fix what is wrong.
package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/secrets"
)

// Defaults of the environment (docs/configuration.md lists them).
const (
	ListenDefault        = "127.0.0.1:8080"
	NATSListenDefault    = "127.0.0.1:4223"
	DataDirDefault       = "./.agentfleet"
	WorkersDefault       = 2
	WorkerSlotsDefault   = 8
	MetricsListenDefault = "127.0.0.1:9464"
	DrainTimeoutDefault  = 30 * time.Second
	// SandboxProcessesDefaultMax bounds the default SandboxProcesses: an
	// idle sandbox process holds about 20 MiB, so 64 hold about 1.3 GiB.
	SandboxProcessesDefaultMax = 64
)

// DispatcherMetricsListenDefault is where a dispatcher, and dev mode,
// serve their metrics by default; MetricsListenDefault is a worker's.
// They differ so that both can run on one host.
const DispatcherMetricsListenDefault = "127.0.0.1:9463"

// Config is the environment of a fleet process.
type Config struct {
	// Listen is the dispatcher's (or dev mode's) HTTP address.
	Listen     string
	AdminToken string
	// DatabaseURL is a postgres:// URL; empty means SQLite in DataDir.
	DatabaseURL string
	// NATSURL is the NATS server, or every node of a cluster separated
	// by commas (tls:// for TLS); empty means an embedded server.
	NATSURL string
	// NATSCreds (AGENTFLEET_NATS_CREDS) is the fleet's NATS creds file;
	// NATSSigningKey (AGENTFLEET_NATS_SIGNING_KEY) the issuer bundle a
	// dispatcher signs and revokes tenants' subscriber creds with. Both
	// are written by `agentctl nats-auth`; dev mode makes its own.
	NATSCreds      string
	NATSSigningKey string
	// NATSTenantConsumers (AGENTFLEET_NATS_TENANT_CONSUMERS, default
	// bus.TenantConsumersDefault) bounds the JetStream consumers one
	// tenant's NATS creds hold at once.
	NATSTenantConsumers int
	// natsAuthDir holds the embedded server's auth (dev mode).
	natsAuthDir string
	// NATSReplicas (AGENTFLEET_NATS_REPLICAS, default 1) is the replicas
	// of every stream and KV bucket on a NATS cluster; the scheduler's
	// lease holder applies it to the existing ones. The embedded server
	// of dev mode always has 1.
	NATSReplicas int
	// NATSTLSCA, NATSTLSCert and NATSTLSKey are PEM files: the CA of the
	// NATS servers' certificates, and a client certificate and key for
	// servers that verify clients.
	NATSTLSCA   string
	NATSTLSCert string
	NATSTLSKey  string
	// NATSListen is where dev mode's embedded server also listens, so
	// `nats sub` works from another terminal. Empty: in-process only.
	NATSListen string
	DataDir    string
	// Workers is how many in-process workers dev mode runs.
	Workers     int
	WorkerSlots int
	// MetricsListen is where /metrics (with tenant labels, hence never
	// on the API port) and /healthz are served; empty means the role's
	// default (workerMetricsListen, dispatcherMetricsListen).
	MetricsListen string
	// Prefix is the NATS subject prefix (default "af").
	Prefix string
	// ReadyDepth is how many turns the scheduler keeps ready for the
	// workers beyond those they are running (0: the scheduler default).
	ReadyDepth   int
	DrainTimeout time.Duration
	// AckWait is how long a turn message may go without a heartbeat
	// before NATS redelivers it (zero: the bus default, 30s): the time
	// a crashed worker's turns take to come back.
	AckWait time.Duration
	// MaxWaiting bounds the pull requests that may wait at once on the
	// workers' consumer across the fleet (zero: the bus default, 4096).
	// A fleet whose workers wait with more pulls than that (thousands of
	// slots) must raise it. Every process of a fleet must use the same
	// value: the server fixes it when the consumer is created and
	// refuses to change it on an existing one ("max waiting can not be
	// updated"), so raising it on a running fleet means deleting the
	// workers' consumer (or the NATS store) first.
	MaxWaiting int
	// EventsMaxAge is how long the NATS events stream keeps run events
	// (zero: the bus default, 7 days). The store keeps them for Retention;
	// the stream serves subscribers that replay a run from NATS. The
	// server holds about 110 bytes of heap per stored event (its index
	// of the stream's subjects, one per run and event type), so a fleet
	// running many turns keeps fewer days. Every process of a fleet
	// must use the same value: each one sets it on the stream when it
	// connects.
	EventsMaxAge time.Duration
	// StrandedInterval and StrandedAfter set the dispatcher's sweep for
	// runs due a turn that have no turn message in NATS: how often it
	// looks, and how long such a run must have been unchanged (zero:
	// maintain.StrandedIntervalDefault and maintain.StrandedAfterDefault). A
	// shorter StrandedAfter brings a run stranded by a crash back sooner
	// and costs a few more lookups per pass; it cannot queue a turn
	// twice (see maintain.Stranded.Requeue).
	StrandedInterval time.Duration
	StrandedAfter    time.Duration
	// BatchMaxBytes caps the body of POST /v1/batches
	// (AGENTFLEET_BATCH_MAX_BYTES; zero: 256 MiB).
	BatchMaxBytes int64
	// DatabaseMaxConns sizes the Postgres connection pool; zero sizes it
	// from the worker slots (a turn makes a few store calls, and a pool
	// smaller than the slots that need it queues them).
	DatabaseMaxConns int
	// SandboxProcesses caps a worker process's sandbox processes, hence
	// its turns that can wait on fetch, http or ai at once; zero means
	// its slots, at most SandboxProcessesDefaultMax.
	SandboxProcesses int
	// SecretsKey seals webhook trigger secrets at rest (base64 of 32
	// bytes); without it a dispatcher refuses to create triggers, and
	// dev mode keeps one in DataDir. PublicURL makes trigger hook URLs
	// absolute.
	SecretsKey string
	PublicURL  string

	// SecretsKeyPrevious (AGENTFLEET_SECRETS_KEY_PREVIOUS) are the keys
	// SecretsKey replaced, comma-separated: what they sealed still
	// opens until a rekey (agentctl secrets rekey) seals it again.
	SecretsKeyPrevious string

	// EgressAllow (AGENTFLEET_EGRESS_ALLOW) opens host names, IPs and
	// CIDRs past the network guard, fleet-wide: for every agent's fetch
	// and http and for run callbacks and approval notifications. It is
	// the only thing that opens loopback (an agent's egress opens private
	// ranges only); nothing opens a cloud metadata address, and an entry
	// naming only one is refused at start. Dev mode adds nothing to it:
	// set it to 127.0.0.1 to let scripts reach a local test server, and
	// know that they then reach the fleet's own ports there too.
	EgressAllow string
	// EgressPrivate (AGENTFLEET_EGRESS_PRIVATE) "deny" keeps every
	// private range closed, whatever EgressAllow and the agents' egress
	// say; "allow" (the default, also "") lets them open some.
	EgressPrivate string
	// SandboxMemory bounds the memory of a worker process's sandbox
	// processes together (sandbox.Config.MemoryTotal); zero derives it
	// from the cgroup memory limit (sandbox.DefaultMemoryTotal), or sets
	// none outside a cgroup with a limit.
	SandboxMemory int64
	Model         llm.Config
	// Retention is how long the dispatcher keeps ended runs before it
	// deletes them with their trace (AGENTFLEET_RETENTION, default
	// RetentionDefault; zero keeps them all). RetentionInterval is how
	// often it looks (no environment variable; zero:
	// RetentionIntervalDefault).
	Retention         time.Duration
	RetentionInterval time.Duration
	// TenantStreams caps each tenant's concurrent event streams and
	// ?wait polls on a dispatcher (AGENTFLEET_TENANT_STREAMS; zero:
	// api.TenantStreamsDefault).
	TenantStreams int
}

// ConfigFromEnv reads the environment, applying defaults.
func ConfigFromEnv() (Config, error) {
	c := Config{
		Listen:         envOr("AGENTFLEET_LISTEN", ListenDefault),
		AdminToken:     os.Getenv("AGENTFLEET_ADMIN_TOKEN"),
		DatabaseURL:    os.Getenv("AGENTFLEET_DATABASE_URL"),
		NATSURL:        os.Getenv("AGENTFLEET_NATS_URL"),
		NATSListen:     envOr("AGENTFLEET_NATS_LISTEN", NATSListenDefault),
		NATSTLSCA:      os.Getenv("AGENTFLEET_NATS_TLS_CA"),
		NATSTLSCert:    os.Getenv("AGENTFLEET_NATS_TLS_CERT"),
		NATSTLSKey:     os.Getenv("AGENTFLEET_NATS_TLS_KEY"),
		NATSCreds:      os.Getenv("AGENTFLEET_NATS_CREDS"),
		NATSSigningKey: os.Getenv("AGENTFLEET_NATS_SIGNING_KEY"),
		DataDir:        envOr("AGENTFLEET_DATA_DIR", DataDirDefault),
		MetricsListen:  os.Getenv("AGENTFLEET_METRICS_LISTEN"),
		Prefix:         os.Getenv("AGENTFLEET_NATS_PREFIX"),
		DrainTimeout:   DrainTimeoutDefault,
		Model:          llm.ConfigFromEnv(),
		SecretsKey:     os.Getenv(secrets.EnvKey),
		PublicURL:      strings.TrimRight(os.Getenv("AGENTFLEET_PUBLIC_URL"), "/"),
		EgressAllow:    os.Getenv("AGENTFLEET_EGRESS_ALLOW"),
		EgressPrivate:  os.Getenv("AGENTFLEET_EGRESS_PRIVATE"),
	}
	c.SecretsKeyPrevious = os.Getenv(secrets.EnvKeyPrevious)
	var errs []error
	c.Workers = envInt("AGENTFLEET_WORKERS", WorkersDefault, &errs)
	c.WorkerSlots = envInt("AGENTFLEET_WORKER_SLOTS", WorkerSlotsDefault, &errs)
	c.ReadyDepth = envInt("AGENTFLEET_READY_DEPTH", 0, &errs)
	c.NATSReplicas = envInt("AGENTFLEET_NATS_REPLICAS", bus.ReplicasDefault, &errs)
	if c.NATSTenantConsumers = envInt("AGENTFLEET_NATS_TENANT_CONSUMERS", bus.TenantConsumersDefault, &errs); c.NATSTenantConsumers == 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_NATS_TENANT_CONSUMERS=0: must be 1 to 10000 (unset: %d)", bus.TenantConsumersDefault))
	}
	c.MaxWaiting = envInt("AGENTFLEET_MAX_WAITING", 0, &errs)
	c.DatabaseMaxConns = envInt("AGENTFLEET_DATABASE_MAX_CONNS", 0, &errs)
	c.SandboxProcesses = envInt("AGENTFLEET_SANDBOX_PROCESSES", 0, &errs)
	c.SandboxMemory = envBytes("AGENTFLEET_SANDBOX_MEMORY", &errs)
	c.BatchMaxBytes = envBytes("AGENTFLEET_BATCH_MAX_BYTES", &errs)
	if c.TenantStreams = envInt("AGENTFLEET_TENANT_STREAMS", 0, &errs); c.TenantStreams < 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_TENANT_STREAMS=%d must be at least 1 (unset: %d)", c.TenantStreams, api.TenantStreamsDefault))
	}
	c.DrainTimeout = envDuration("AGENTFLEET_DRAIN_TIMEOUT", DrainTimeoutDefault, 0, "30s", &errs)
	c.AckWait = envDuration("AGENTFLEET_ACK_WAIT", 0, time.Second, "30s", &errs)
	c.StrandedInterval = envDuration("AGENTFLEET_STRANDED_INTERVAL", 0, time.Second, "30s", &errs)
	c.StrandedAfter = envDuration("AGENTFLEET_STRANDED_AFTER", 0, time.Second, "1m", &errs)
	if v := os.Getenv("AGENTFLEET_EVENTS_MAX_AGE"); v != "" {
		d, err := parseDays(v)
		if err != nil || d < time.Minute {
			errs = append(errs, fmt.Errorf("AGENTFLEET_EVENTS_MAX_AGE=%q must be a duration of at least 1m, like \"24h\" or \"7d\"", v))
		}
		c.EventsMaxAge = d
	}
	c.Retention = envRetention(&errs)
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// envRetention reads AGENTFLEET_RETENTION: unset is RetentionDefault, 0
// keeps every run, anything else a duration of at least RetentionMin.
func envRetention(errs *[]error) time.Duration {
	v, ok := os.LookupEnv("AGENTFLEET_RETENTION")
	if !ok || v == "" {
		return RetentionDefault
	}
	d, err := parseDays(v)
	if err != nil || d < 0 || (d > 0 && d < RetentionMin) {
		*errs = append(*errs, fmt.Errorf("AGENTFLEET_RETENTION=%q must be 0 (keep every run) or a duration of at least %s, like \"30d\" or \"72h\"", v, RetentionMin))
		return RetentionDefault
	}
	return d
}

// Validate checks the configuration and says how to fix it.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("AGENTFLEET_LISTEN=%q must be host:port, e.g. %s", c.Listen, ListenDefault))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("AGENTFLEET_METRICS_LISTEN=%q must be host:port (unset: %s for a dispatcher or dev mode, %s for a worker; port 0 picks a free one)",
				c.MetricsListen, DispatcherMetricsListenDefault, MetricsListenDefault))
		}
	}
	if c.NATSListen != "" {
		if _, _, err := net.SplitHostPort(c.NATSListen); err != nil {
			errs = append(errs, fmt.Errorf("AGENTFLEET_NATS_LISTEN=%q must be host:port, e.g. %s", c.NATSListen, NATSListenDefault))
		}
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, fmt.Errorf("AGENTFLEET_DATABASE_URL must be a postgres:// URL (unset it to use SQLite in AGENTFLEET_DATA_DIR)"))
	}
	if c.Workers < 0 || c.WorkerSlots < 1 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_WORKERS must be >= 0 and AGENTFLEET_WORKER_SLOTS >= 1 (got %d and %d)", c.Workers, c.WorkerSlots))
	}
	if c.ReadyDepth < 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_READY_DEPTH must not be negative"))
	}
	if c.DatabaseMaxConns < 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_DATABASE_MAX_CONNS must not be negative (0: sized from AGENTFLEET_WORKER_SLOTS)"))
	}
	if c.SandboxProcesses < 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_SANDBOX_PROCESSES must not be negative (0: the worker slots, at most %d)", SandboxProcessesDefaultMax))
	}
	if per := sandbox.ProcessMemory(sandbox.Limits{}); c.SandboxMemory < 0 || (c.SandboxMemory > 0 && c.SandboxMemory < per) {
		errs = append(errs, fmt.Errorf("AGENTFLEET_SANDBOX_MEMORY=%d bytes is less than one sandbox process can hold (%d bytes, %.2f GiB); raise it, or unset it to derive it from the cgroup memory limit",
			c.SandboxMemory, per, float64(per)/(1<<30)))
	}
	if c.NATSReplicas < 0 || c.NATSReplicas > 5 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_NATS_REPLICAS=%d must be 1 to 5: 3 on a 3- or 5-node JetStream cluster, 1 on a single server", c.NATSReplicas))
	}
	if c.NATSTenantConsumers < 0 || c.NATSTenantConsumers > 10000 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_NATS_TENANT_CONSUMERS=%d must be 1 to 10000 (unset: %d)", c.NATSTenantConsumers, bus.TenantConsumersDefault))
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		errs = append(errs, errors.New("AGENTFLEET_NATS_TLS_CERT and AGENTFLEET_NATS_TLS_KEY go together: set both (a client certificate and its key) or neither"))
	}
	for name, path := range map[string]string{"AGENTFLEET_NATS_TLS_CA": c.NATSTLSCA, "AGENTFLEET_NATS_TLS_CERT": c.NATSTLSCert, "AGENTFLEET_NATS_TLS_KEY": c.NATSTLSKey} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q must be a readable PEM file: %w", name, path, err))
		}
	}
	if c.MaxWaiting < 0 {
		errs = append(errs, fmt.Errorf("AGENTFLEET_MAX_WAITING must not be negative (0: the default, %d)", bus.MaxWaitingDefault))
	}
	if c.Retention < 0 || c.RetentionInterval < 0 {
		errs = append(errs, errors.New("fleet: Config.Retention and Config.RetentionInterval must not be negative (Retention 0 keeps every run)"))
	}
	if c.DataDir == "" {
		errs = append(errs, fmt.Errorf("AGENTFLEET_DATA_DIR must not be empty"))
	}
	if c.SecretsKey != "" {
		if _, err := secrets.ParseKeys(c.SecretsKey, c.SecretsKeyPrevious); err != nil {
			errs = append(errs, err)
		}
	} else if c.SecretsKeyPrevious != "" {
		errs = append(errs, fmt.Errorf("%s is set without %s: put the new key in %s and keep the replaced ones in %s", secrets.EnvKeyPrevious, secrets.EnvKey, secrets.EnvKey, secrets.EnvKeyPrevious))
	}
	if _, err := egress.ParseAllow(c.EgressAllow); err != nil {
		errs = append(errs, fmt.Errorf("AGENTFLEET_EGRESS_ALLOW: %w", err))
	}
	if c.EgressPrivate != "" && c.EgressPrivate != "allow" && c.EgressPrivate != "deny" {
		errs = append(errs, fmt.Errorf("AGENTFLEET_EGRESS_PRIVATE=%q: use deny (no private address, whatever the allow-lists say) or allow (the default)", c.EgressPrivate))
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("AGENTFLEET_PUBLIC_URL=%q must be the dispatcher's public base URL, like https://agents.example.com", c.PublicURL))
		}
	}
	return errors.Join(errs...)
}

// workerMetricsListen is a worker process's metrics address.
func (c Config) workerMetricsListen() string {
	return cmp.Or(c.MetricsListen, MetricsListenDefault)
}

// dispatcherMetricsListen is the metrics address of a dispatcher, and of
// dev mode, whose one listener serves the whole process's metrics.
func (c Config) dispatcherMetricsListen() string {
	return cmp.Or(c.MetricsListen, DispatcherMetricsListenDefault)
}

// secretsBox is the box of SecretsKey, or nil without one (Validate has
// checked it).
func (c Config) secretsBox() *secrets.Box {
	if c.SecretsKey == "" {
		return nil
	}
	b, _ := secrets.ParseKeys(c.SecretsKey, c.SecretsKeyPrevious)
	return b
}

// egress is the network guard's configuration (Validate has checked it).
func (c Config) egress() egress.Config {
	e, _ := egress.ParseAllow(c.EgressAllow)
	e.DenyPrivate = c.EgressPrivate == "deny"
	return e
}

// SQLitePath is where the embedded store lives.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "agentfleet.db") }

// NATSStoreDir is where the embedded NATS server keeps JetStream data.
func (c Config) NATSStoreDir() string { return filepath.Join(c.DataDir, "nats") }

// envDuration reads a duration of at least least from the environment
// variable name; unset means def.
func envDuration(name string, def, least time.Duration, example string, errs *[]error) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < least {
		*errs = append(*errs, fmt.Errorf("%s=%q must be a duration of at least %s, like %q", name, v, least, example))
		return def
	}
	return d
}

// parseDays is time.ParseDuration that also takes a whole number of
// days ("7d"), the unit retention is thought in.
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 36500 {
			return 0, fmt.Errorf("%q is not a number of days", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// byteUnits are the suffixes envBytes takes: binary as in "512MiB" or,
// as Kubernetes writes them, "512Mi"; decimal as in "2GB".
var byteUnits = map[string]float64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

// envBytes reads a size in bytes ("2GiB", "1.5Gi", "2147483648");
// unset means 0.
func envBytes(key string, errs *[]error) int64 {
	v := strings.TrimSpace(os.Getenv(key))
	if v == "" {
		return 0
	}
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	unit, known := byteUnits[strings.TrimSpace(v[i:])]
	if err != nil || !known || n*unit >= 1<<63 {
		*errs = append(*errs, fmt.Errorf("%s=%q is not a size; write bytes, or a number with KiB, MiB, GiB (or Ki, Mi, Gi), like \"4GiB\"", key, v))
		return 0
	}
	return int64(n * unit)
}

func envInt(key string, def int, errs *[]error) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q is not a whole number", key, v))
		return def
	}
	return n
}

// databaseMaxConns is the Postgres pool size: the configured one, or half
// the worker slots within [10, 32] (several processes share the server's
// connection limit, 100 by default).
func (c Config) databaseMaxConns() int {
	if c.DatabaseMaxConns > 0 {
		return c.DatabaseMaxConns
	}
	return min(max(10, c.WorkerSlots/2), 32)
}

// sandboxConfig is the sandbox pool of a worker process running workers
// workers.
func (c Config) sandboxConfig(workers int) sandbox.Config {
	e := c.egress()
	return sandbox.Config{MaxProcesses: c.sandboxProcesses(workers), MemoryTotal: c.SandboxMemory,
		Network: sandbox.NetworkConfig{Allow: e.Allow, AllowHosts: e.AllowHosts, DenyPrivate: e.DenyPrivate}}
}

// sandboxProcesses caps the sandbox processes of a worker process running
// workers workers: the configured number, or one per slot up to
// SandboxProcessesDefaultMax. A turn holds its process while it waits on
// a host call, so fewer processes than slots would leave slots idle
// behind turns waiting on fetch or ai.
func (c Config) sandboxProcesses(workers int) int {
	if c.SandboxProcesses > 0 {
		return c.SandboxProcesses
	}
	return min(max(1, workers)*c.WorkerSlots, SandboxProcessesDefaultMax)
}
