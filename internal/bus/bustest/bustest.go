// Package bustest gives tests elsewhere in the fleet a real NATS server and
// a connected bus.Bus in one line each, plus a nats-server binary for tests
// that need the server in another process.
//
// Everything here runs a real server (embedded, or built from the
// nats-server module the project already depends on); nothing is mocked.
// Servers listen on 127.0.0.1 with a port the kernel picks, never the
// default 4222, so they coexist with any system server.
//
// Multi-process tests: BuildServerBinary runs
//
//	go build -o <dir>/nats-server github.com/nats-io/nats-server/v2
//
// once per test binary (the result is cached in the OS temp dir per
// nats-server version, and go's build cache makes a rebuild quick), and
// StartServerProcess runs it as `nats-server -js -a 127.0.0.1 -p <port>
// -sd <dir>`, returning once the server logs that it is ready. The same
// command builds a server by hand for manual testing.
package bustest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// StartServer starts an embedded JetStream server on a random loopback
// port with its store in a test temp dir, and shuts it down when the test
// ends. Connect in-process with Connect, or by URL with e.ClientURL().
func StartServer(t testing.TB) *bus.Embedded {
	t.Helper()
	return StartServerAt(t, "127.0.0.1:0", t.TempDir())
}

// StartServerAt starts an embedded server on listen with its store in
// storeDir and shuts it down when the test ends. Calling it again with a
// stopped server's Listen() and StoreDir() restarts "the same" server.
func StartServerAt(t testing.TB, listen, storeDir string) *bus.Embedded {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: listen, StoreDir: storeDir})
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// Connect connects a Bus in-process to e, with the Config given by
// modifying a test default (Name set to the test's name), and closes it
// when the test ends.
func Connect(t testing.TB, e *bus.Embedded, mods ...func(*bus.Config)) *bus.Bus {
	t.Helper()
	return connect(t, config(t, mods), bus.WithEmbedded(e))
}

// ConnectURL connects a Bus by URL (for tests that restart the server, or
// talk to a server process) and closes it when the test ends.
func ConnectURL(t testing.TB, url string, mods ...func(*bus.Config)) *bus.Bus {
	t.Helper()
	cfg := config(t, mods)
	cfg.URL = url
	return connect(t, cfg)
}

func config(t testing.TB, mods []func(*bus.Config)) bus.Config {
	cfg := bus.Config{Name: t.Name()}
	if os.Getenv("AGENTFLEET_TEST_LOG") != "" {
		// Opt-in, and to stderr rather than t.Log: connection callbacks
		// can fire after the test has returned.
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

func connect(t testing.TB, cfg bus.Config, opts ...bus.Option) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, cfg, opts...)
	if err != nil {
		t.Fatalf("connect bus: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

var serverBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildServerBinary builds nats-server from the module version in go.mod
// and returns the binary's path. The build runs once per test binary and
// is cached across runs in the OS temp dir.
func BuildServerBinary(t testing.TB) string {
	t.Helper()
	serverBuild.once.Do(func() {
		serverBuild.path, serverBuild.err = buildServer()
	})
	if serverBuild.err != nil {
		t.Fatalf("build nats-server: %v", serverBuild.err)
	}
	return serverBuild.path
}

const serverModule = "github.com/nats-io/nats-server/v2"

func buildServer() (string, error) {
	version := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == serverModule && d.Replace == nil {
				version = d.Version
			}
		}
	}
	var dir string
	if version != "" {
		// Keyed by version, so a bumped go.mod never runs a stale binary.
		dir = filepath.Join(os.TempDir(), "agentfleet-nats-server-"+version)
	} else {
		d, err := os.MkdirTemp("", "agentfleet-nats-server-*")
		if err != nil {
			return "", err
		}
		dir = d
	}
	bin := filepath.Join(dir, "nats-server")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// Build under a temporary name and rename, so concurrent test
	// binaries never run a half-written file.
	tmp, err := os.CreateTemp(dir, "nats-server-*.partial")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(goBin, "build", "-o", tmp.Name(), serverModule)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", serverModule, err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// ServerProcess is a nats-server running as a child process.
type ServerProcess struct {
	// URL is the nats:// URL to connect to.
	URL string
	// Port is the client port it listens on.
	Port     int
	StoreDir string

	cmd      *exec.Cmd
	logDone  chan struct{}
	waitDone chan struct{}
	waitErr  error
	stopOnce sync.Once
}

var (
	readyLine  = regexp.MustCompile(`Server is ready`)
	listenLine = regexp.MustCompile(`Listening for client connections on [^ ]*:(\d+)`)
)

// StartServerProcess runs bin (from BuildServerBinary) with JetStream on
// 127.0.0.1:port (0 picks a free one) and its store in storeDir ("" means
// a test temp dir), waits until it is ready, and stops it when the test
// ends. Restart a server by stopping it and starting another on the same
// Port and StoreDir.
func StartServerProcess(t testing.TB, bin string, port int, storeDir string) *ServerProcess {
	t.Helper()
	if storeDir == "" {
		storeDir = t.TempDir()
	}
	portArg := strconv.Itoa(port)
	if port == 0 {
		portArg = "-1" // the server's "any free port"; 0 would mean 4222
	}
	return startServerProcess(t, bin, storeDir, "-js", "-a", "127.0.0.1", "-p", portArg)
}

// startServerProcess runs bin with args and -sd storeDir until it is
// ready, and stops it when the test ends.
func startServerProcess(t testing.TB, bin, storeDir string, args ...string) *ServerProcess {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-sd", storeDir)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("nats-server stderr: %v", err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	p := &ServerProcess{StoreDir: storeDir, cmd: cmd, logDone: make(chan struct{}), waitDone: make(chan struct{})}
	ready := make(chan int, 1)
	go func() {
		// Read the log to the end, so the server never blocks on a full
		// pipe; the readiness signal is a line in it.
		defer close(p.logDone)
		sc := bufio.NewScanner(stderr)
		listen, signalled := 0, false
		for sc.Scan() {
			line := sc.Text()
			if m := listenLine.FindStringSubmatch(line); m != nil {
				listen, _ = strconv.Atoi(m[1])
			}
			if !signalled && readyLine.MatchString(line) {
				ready <- listen
				signalled = true
			}
		}
	}()
	go func() {
		<-p.logDone // Wait closes the pipe; read it all first
		p.waitErr = cmd.Wait()
		close(p.waitDone)
	}()
	t.Cleanup(p.Stop)
	select {
	case port := <-ready:
		p.Port = port
		p.URL = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	case <-p.waitDone:
		t.Fatalf("nats-server exited before it was ready: %v", p.waitErr)
	case <-time.After(30 * time.Second):
		p.Stop()
		t.Fatalf("nats-server not ready after 30s")
	}
	return p
}

// Stop shuts the server down gracefully (SIGTERM) and waits for it to
// exit, killing it if it takes longer than 10s. Safe to call twice.
func (p *ServerProcess) Stop() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.waitDone:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.waitDone
		}
	})
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (p *ServerProcess) Kill() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.waitDone
	})
}
