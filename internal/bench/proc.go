// One fleet process the bench started: its start, readiness, stop and log.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one fleet process the bench started. Its output goes to a log
// file in the bench's directory.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	pipe    *os.File
	ready   chan string // the readiness line
	exited  chan struct{}
	logDone chan struct{}
	err     error
	once    sync.Once
}

func startProc(exe, name, logPath, readyLine string, args, env []string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	// Die with the bench: a fleet process must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pw.Close()
	p := &proc{name: name, cmd: cmd, log: logPath, pipe: pr, ready: make(chan string, 1), exited: make(chan struct{}), logDone: make(chan struct{})}
	go func() {
		defer close(p.logDone)
		defer logFile.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if !signalled && strings.Contains(line, readyLine) {
				p.ready <- line
				signalled = true
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady waits for the process's readiness line.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-p.ready:
		return line, nil
	case <-p.exited:
		return "", fmt.Errorf("%s exited before it was ready (%v); its log: %s%s", p.name, p.err, p.log, p.tail())
	case <-t.C:
		return "", fmt.Errorf("%s not ready after %s; its log: %s%s", p.name, timeout, p.log, p.tail())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop ends the process with SIGTERM (a drain, for a worker), or SIGKILL
// after timeout, and waits for it and its log.
func (p *proc) stop(timeout time.Duration) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.finishLog()
	})
}

// kill ends the process as a crash would.
func (p *proc) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.finishLog()
	})
}

// finishLog waits for the log copier; a grandchild that kept the pipe
// open must not hold the bench, so the pipe is closed after a while.
func (p *proc) finishLog() {
	select {
	case <-p.logDone:
	case <-time.After(2 * time.Second):
		_ = p.pipe.Close()
		<-p.logDone
	}
	_ = p.pipe.Close()
}

func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return "\n--- " + p.name + " log (tail) ---\n" + string(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
