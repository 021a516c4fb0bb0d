package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
)

// target is the fleet a bench drives.
type target interface {
	// apiURL and adminToken reach its dispatcher.
	apiURL() string
	adminToken() string
	// store is its store of record, or nil when the bench cannot read it
	// (a fleet driven by URL).
	store() store.Store
	// natsURL is its NATS server, or "" when unknown; natsCreds the
	// creds file to connect with ("" for none).
	natsURL() string
	natsCreds() string
	// local reports whether the fleet's processes are this process and
	// its descendants, so that CPU and memory can be measured.
	local() bool
	close() error
}

// embeddedFleet is dev mode (fleet.StartDev) in this process: embedded
// NATS (or Config.NATSURL) and SQLite in a temp dir (or Postgres).
type embeddedFleet struct {
	dev    *fleet.Dev
	dir    string
	keep   bool
	cancel context.CancelFunc
	done   chan error
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// modelHTTPClient is the model client's HTTP client for a worker process
// with slots concurrent turns: every turn keeps its connection warm, none
// is closed for want of an idle slot and re-dialled. Unless http1, it
// speaks HTTP/2 without TLS to the fake model, as a client over TLS to a
// provider speaks HTTP/2: the calls share a few connections. Over
// HTTP/1.1 each call in flight holds one, and in one process the fake
// model's end of it another, so 10,000 turns in flight need 20,000 file
// descriptors.
func modelHTTPClient(slots int, http1 bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = slots + 16
	tr.MaxIdleConnsPerHost = slots + 16
	if !http1 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr}
}

// maxWaiting sizes the workers' consumer's MaxWaiting for slots in all:
// the bus default unless the slots need more. It only takes effect on a
// consumer that does not exist yet.
func maxWaiting(cfg Config, slots int) int {
	if cfg.MaxWaiting > 0 {
		return cfg.MaxWaiting
	}
	if 2*slots > bus.MaxWaitingDefault {
		return 2 * slots
	}
	return 0
}

func startEmbedded(ctx context.Context, cfg Config, m *model, logger *slog.Logger) (_ *embeddedFleet, err error) {
	dir, err := os.MkdirTemp("", "agentfleet-bench-*")
	if err != nil {
		return nil, err
	}
	f := &embeddedFleet{dir: dir, keep: cfg.KeepDir}
	defer func() {
		if err != nil {
			f.removeDir()
		}
	}()
	dbURL := ""
	if cfg.DatabaseURL != "" {
		if dbURL, err = freshSchema(ctx, cfg); err != nil {
			return nil, err
		}
	}
	natsListen := ""
	if cfg.NATSURL == "" {
		// A socket besides the in-process connection, so a subscriber
		// can connect as `nats sub` would.
		natsListen = "127.0.0.1:0"
	}
	slots := cfg.Workers * cfg.Slots
	mw := maxWaiting(cfg, slots)
	if cfg.NATSURL != "" && cfg.MaxWaiting == 0 {
		// The workers' consumer may exist already on that server, and
		// the server refuses to change its MaxWaiting.
		mw = 0
	}
	fcfg := fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AdminToken: newToken(), DatabaseURL: dbURL,
		NATSURL: cfg.NATSURL, NATSCreds: cfg.NATSCreds, NATSListen: natsListen, DataDir: dir,
		Workers: cfg.Workers, WorkerSlots: cfg.Slots, DrainTimeout: 10 * time.Second,
		AckWait: cfg.AckWait, MaxWaiting: mw, ReadyDepth: cfg.ReadyDepth,
		Model: llm.Config{Model: ModelName, BaseURL: m.URL(), Stream: cfg.Stream},
	}
	if cfg.SideEffects || cfg.Scenario == Tools {
		// The side-effect target and the tools scenario's MCP server
		// listen on loopback.
		fcfg.EgressAllow = "127.0.0.1"
	}
	mc, err := openaiwire.New(openaiwire.Config{BaseURL: m.URL(), Model: ModelName, HTTPClient: modelHTTPClient(slots, cfg.ModelHTTP1)})
	if err != nil {
		return nil, err
	}
	dev, err := fleet.StartDev(ctx, fcfg, fleet.DevOptions{ModelClient: llm.WithStreamMode(mc, cfg.Stream), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("start embedded fleet: %w", err)
	}
	f.dev = dev
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel, f.done = cancel, make(chan error, 1)
	go func() { f.done <- dev.Run(runCtx) }()
	return f, nil
}

func (f *embeddedFleet) apiURL() string     { return f.dev.URL() }
func (f *embeddedFleet) adminToken() string { return f.dev.AdminToken }
func (f *embeddedFleet) store() store.Store { return f.dev.Store }
func (f *embeddedFleet) local() bool        { return true }
func (f *embeddedFleet) natsURL() string {
	if f.dev.Embedded != nil {
		return f.dev.Embedded.ClientURL()
	}
	return f.dev.Config.NATSURL
}

func (f *embeddedFleet) natsCreds() string { return f.dev.Config.NATSCreds }

func (f *embeddedFleet) close() error {
	f.cancel()
	err := <-f.done
	f.removeDir()
	return err
}

func (f *embeddedFleet) removeDir() {
	if !f.keep {
		_ = os.RemoveAll(f.dir)
	}
}

// urlFleet is an existing fleet, reached through its API with an admin
// token; its workers must be pointed at the bench's fake model.
type urlFleet struct {
	url, token, nats, creds string
}

func (f *urlFleet) apiURL() string     { return f.url }
func (f *urlFleet) adminToken() string { return f.token }
func (f *urlFleet) store() store.Store { return nil }
func (f *urlFleet) natsURL() string    { return f.nats }
func (f *urlFleet) natsCreds() string  { return f.creds }
func (f *urlFleet) local() bool        { return false }
func (f *urlFleet) close() error       { return nil }

// freshSchema creates (and migrates) a new schema in cfg.DatabaseURL's
// database, or cfg.Schema when set, and returns the URL that selects it.
func freshSchema(ctx context.Context, cfg Config) (string, error) {
	schema := cfg.Schema
	if schema == "" {
		schema = "agentfleet_bench_" + time.Now().UTC().Format("20060102_150405") + "_" + newToken()[:6]
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: cfg.DatabaseURL, Schema: schema})
	if err != nil {
		return "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	_ = st.Close()
	return withSearchPath(cfg.DatabaseURL, schema)
}

func withSearchPath(raw, schema string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func schemaOf(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	return u.Query().Get("search_path")
}

var errStalled = errors.New("no run finished for too long")
