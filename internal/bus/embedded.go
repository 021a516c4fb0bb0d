package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	// Name is the server name (defaults to one the server generates).
	Name string
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

// Embedded is a nats-server running inside this process.
type Embedded struct {
	srv      *server.Server
	storeDir string
	tempDir  bool
	listen   string

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
		host, portStr, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: want host:port: %w", cfg.Listen, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("embedded nats: listen address %q: port must be 0-65535", cfg.Listen)
		}
		if port == 0 {
			// The server reads 0 as "the default port 4222"; -1 is its
			// "any free port".
			port = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, port
	}

	e := &Embedded{storeDir: cfg.StoreDir}
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

// ClientURL is the nats:// URL clients in other processes connect to, or
// "" for an in-process-only server.
func (e *Embedded) ClientURL() string {
	if e.listen == "" {
		return ""
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
