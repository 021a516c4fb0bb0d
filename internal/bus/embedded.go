package bus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig shapes an in-process nats-server with JetStream.
type EmbeddedConfig struct {
	// Listen is the "host:port" to accept clients on; port 0 picks a free
	// port. Empty means no socket at all: only in-process connections
	// (WithEmbedded), which is what single-process tests and tools want.
	Listen string
	// StoreDir holds the JetStream file store. Empty means a fresh
	// temporary directory, removed by Shutdown.
	StoreDir string
	// Name is the server name (defaults to one the server generates). A
	// cluster node needs one, and keeps it across restarts: it is how
	// the others know it again, even when it comes back with an empty
	// store.
	Name string
	// Cluster makes the server a node of a JetStream cluster.
	Cluster *EmbeddedCluster
	// TLS, when set, makes clients connect with TLS (tls:// URLs) using
	// its certificates; with ClientAuth RequireAndVerifyClientCert the
	// server also verifies theirs.
	TLS *tls.Config
	// MaxMemory and MaxStore cap JetStream's memory and file storage in
	// bytes; zero lets the server size them from the machine.
	MaxMemory int64
	MaxStore  int64
	// AuthConf is a nats-server configuration fragment that secures the
	// server (natsauth's server.conf: operator, accounts, resolver).
	// Empty: no authentication.
	AuthConf string
	// ReadyTimeout bounds how long StartEmbedded waits for the server to
	// accept connections (default 10s).
	ReadyTimeout time.Duration
	// Logger receives the server's notices, warnings and errors; nil
	// silences the server.
	Logger *slog.Logger
}

// EmbeddedCluster is a node's place in a cluster: the cluster's name,
// where this node accepts routes from the others, and their route URLs.
type EmbeddedCluster struct {
	Name string
	// Listen is this node's route address ("host:port", not 0: the
	// others dial it).
	Listen string
	// Routes are the other nodes' route URLs (nats://host:port).
	Routes []string
}

// Embedded is a nats-server running inside this process.
type Embedded struct {
	srv      *server.Server
	storeDir string
	tempDir  bool
	listen   string
	tls      bool

	shutdownOnce sync.Once
}

// StartEmbedded starts a nats-server with JetStream in this process and
// waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	opts := &server.Options{}
	if cfg.AuthConf != "" {
		if err := opts.ProcessConfigString(cfg.AuthConf); err != nil {
			return nil, fmt.Errorf("embedded nats: auth configuration: %w", err)
		}
	}
	opts.ServerName, opts.JetStream, opts.NoSigs, opts.NoLog = cfg.Name, true, true, cfg.Logger == nil
	opts.JetStreamMaxMemory, opts.JetStreamMaxStore = cfg.MaxMemory, cfg.MaxStore
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := splitListen(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: %w", cfg.Listen, err)
		}
		if port == 0 {
			// The server reads 0 as "the default port 4222"; -1 is its
			// "any free port".
			port = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, port
	}

	if err := cfg.Cluster.apply(opts, cfg.Name); err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSConfig = true, cfg.TLS
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}

	e := &Embedded{storeDir: cfg.StoreDir, tls: cfg.TLS != nil}
	if e.storeDir == "" {
		dir, err := os.MkdirTemp("", "agentfleet-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded nats: store dir: %w", err)
		}
		e.storeDir, e.tempDir = dir, true
	}
	opts.StoreDir = e.storeDir

	srv, err := server.NewServer(opts)
	if err != nil {
		e.removeTemp()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(serverLogger{cfg.Logger}, false, false, false)
	}
	e.srv = srv
	srv.Start()
	if !srv.ReadyForConnections(cfg.ReadyTimeout) {
		e.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready for connections after %s (listen %q in use?)", cfg.ReadyTimeout, cfg.Listen)
	}
	if !srv.JetStreamEnabled() {
		e.Shutdown()
		return nil, fmt.Errorf("embedded nats: JetStream did not start (store dir %s unusable or locked?)", e.storeDir)
	}
	if !opts.DontListen {
		if addr, ok := srv.Addr().(*net.TCPAddr); ok {
			e.listen = net.JoinHostPort(opts.Host, strconv.Itoa(addr.Port))
		}
	}
	return e, nil
}

func (c *EmbeddedCluster) apply(opts *server.Options, name string) error {
	if c == nil {
		return nil
	}
	if name == "" {
		return errors.New("embedded nats: a cluster node needs a Name")
	}
	host, port, err := splitListen(c.Listen)
	if err != nil || port <= 0 {
		return fmt.Errorf("embedded nats: cluster listen address %q: want host:port with a fixed port", c.Listen)
	}
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = c.Name, host, port
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return fmt.Errorf("embedded nats: route %q: want nats://host:port", r)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return nil
}

// ClientURL is the nats:// (or tls://) URL clients in other processes connect to, or
// "" for an in-process-only server.
func (e *Embedded) ClientURL() string {
	if e.listen == "" {
		return ""
	}
	if e.tls {
		return "tls://" + e.listen
	}
	return "nats://" + e.listen
}

// Listen is the address the server accepts clients on, with the port it
// actually bound ("" for an in-process-only server). Restarting a server
// on the same Listen and StoreDir is how tests simulate a server restart.
func (e *Embedded) Listen() string { return e.listen }

// StoreDir is the JetStream store directory in use.
func (e *Embedded) StoreDir() string { return e.storeDir }

// Shutdown stops the server, waits until it has stopped, and removes the
// store directory if StartEmbedded created it. It is safe to call twice.
func (e *Embedded) Shutdown() {
	e.shutdownOnce.Do(func() {
		if e.srv != nil {
			e.srv.Shutdown()
			e.srv.WaitForShutdown()
		}
		e.removeTemp()
	})
}

// WaitForShutdown blocks until the server has stopped, for a process whose
// server is stopped by something other than its own code (a signal handler
// calling Shutdown).
func (e *Embedded) WaitForShutdown() { e.srv.WaitForShutdown() }

func splitListen(listen string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("port must be 0-65535")
	}
	return host, port, nil
}

// inProcess lets nats.go dial the server through a pipe: it implements
// nats.InProcessConnProvider without putting that method on Embedded's
// public surface.
type inProcess struct{ e *Embedded }

func (p inProcess) InProcessConn() (net.Conn, error) {
	if p.e == nil || p.e.srv == nil {
		return nil, errors.New("embedded nats: no server")
	}
	return p.e.srv.InProcessConn()
}

func (e *Embedded) removeTemp() {
	if e.tempDir {
		_ = os.RemoveAll(e.storeDir)
	}
}

// serverLogger adapts slog to the server's printf-style logger. Debug and
// trace are never enabled (SetLoggerV2 flags), so those go to Debug.
type serverLogger struct{ l *slog.Logger }

func (s serverLogger) Noticef(format string, v ...any) {
	s.l.Info(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (s serverLogger) Warnf(format string, v ...any) {
	s.l.Warn(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (s serverLogger) Fatalf(format string, v ...any) {
	s.l.Error(fmt.Sprintf(format, v...), "component", "nats-server", "fatal", true)
}

func (s serverLogger) Errorf(format string, v ...any) {
	s.l.Error(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (s serverLogger) Debugf(format string, v ...any) {
	s.l.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (s serverLogger) Tracef(format string, v ...any) {
	s.l.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}
