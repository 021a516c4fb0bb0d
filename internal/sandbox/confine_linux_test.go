package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/dop251/goja"
	"github.com/elastic/go-seccomp-bpf/arch"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The probes: Go code that runs inside a real, confined sandbox process,
// as code that escaped goja would. Set before the child hook runs (see
// childTestGlobals); test binaries only.
var _ = func() bool {
	childTestGlobals = func(vm *goja.Runtime) {
		_ = vm.GlobalObject().Set("__probe", probe)
	}
	return true
}()

// probe tries one thing the confinement must refuse and says what
// happened: "ok: ..." if it worked, else "denied: <errno>: <error>".
// What it reads stays in the process: the probe must fail, and a
// failing test should not print the test process's environment.
func probe(what, arg string) string {
	switch what {
	case "open":
		b, err := os.ReadFile(arg)
		if err != nil {
			return denied(err)
		}
		// Not the content: the parent's environ is the test's.
		return fmt.Sprintf("ok: read %d bytes", len(b))
	case "open-threads":
		// The same open from goroutines spread over the process's
		// threads: the filter is on every thread.
		var wg sync.WaitGroup
		out := make([]string, 2*runtime.GOMAXPROCS(0)+4)
		for i := range out {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				f, err := os.Open(arg)
				if err != nil {
					out[i] = denied(err)
					return
				}
				f.Close()
				out[i] = "ok: opened"
			})
		}
		wg.Wait()
		for _, o := range out {
			if !strings.HasPrefix(o, "denied") {
				return o
			}
		}
		return out[0]
	case "socket":
		domain := map[string]int{"inet": unix.AF_INET, "inet6": unix.AF_INET6, "unix": unix.AF_UNIX, "netlink": unix.AF_NETLINK}[arg]
		fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if arg == "netlink" {
			fd, err = unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		}
		if err != nil {
			return denied(err)
		}
		unix.Close(fd)
		return "ok: socket " + strconv.Itoa(fd)
	case "dial":
		c, err := net.Dial("tcp", arg)
		if err != nil {
			return denied(err)
		}
		c.Close()
		return "ok: connected"
	case "kill":
		// Signal 0 only checks that the signal could be sent.
		pid, _ := strconv.Atoi(arg)
		if err := unix.Kill(pid, 0); err != nil {
			return denied(err)
		}
		return "ok: may signal " + arg
	case "fork":
		// A bare fork (clone without CLONE_THREAD), as os/exec's
		// pipe and all would not get that far. The copy exits at once,
		// as syscall.forkAndExecInChild's would.
		pid, _, errno := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if errno != 0 {
			return denied(errno)
		}
		if pid == 0 {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(pid), &ws, 0, nil)
		return "ok: forked"
	case "spawn":
		// A new process, as os/exec starts one (fork, then exec).
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
		if err != nil {
			return denied(err)
		}
		_, _ = p.Wait()
		return "ok: started /bin/true"
	}
	return "unknown probe " + what
}

func denied(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Sprintf("denied: %s: %v", unix.ErrnoName(errno), err)
	}
	return "denied: " + err.Error()
}

// kernelConfinement logs, and returns, what this machine's kernel offers
// a sandbox process: seccomp filters (asked whether the kernel knows the
// filter action the child's filter returns) and the Landlock ABI
// version.
func kernelConfinement(t *testing.T) (landlockABI int) {
	t.Helper()
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	filters := "seccomp filters available"
	if errno != 0 {
		filters = fmt.Sprintf("seccomp filters not available (%v): sandbox processes cannot start", errno)
	}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		t.Logf("kernel %s: %s; Landlock missing (%v): seccomp alone must block", release, filters, err)
		return 0
	}
	t.Logf("kernel %s: %s; Landlock ABI %d, applied %s", release, filters, abi, landlockPath(abi))
	return abi
}

func landlockPath(abi int) string {
	switch {
	case abi >= landlockScopeSignalABI:
		return "to all threads at once (TSYNC, ABI 8)"
	case cgoEnabled():
		return "thread by thread through libpsx (cgo build; TSYNC needs ABI 8)"
	default:
		return "thread by thread through syscall.AllThreadsSyscall (TSYNC needs ABI 8)"
	}
}

// cgoEnabled reports whether this binary links cgo: AllThreadsSyscall
// then refuses, which is how go-landlock tells.
func cgoEnabled() bool {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0)
	return e == syscall.ENOTSUP
}

// probeTargets is what a confined process must not reach: a data dir
// with the files a fleet keeps there, /etc/passwd, the parent's environ,
// and a TCP listener of the parent's.
type probeTargets struct {
	Data    string `json:"data"`
	Token   string `json:"token"`
	Passwd  string `json:"passwd"`
	Environ string `json:"environ"`
	Addr    string `json:"addr"`
	Parent  string `json:"parent"`
}

func newProbeTargets(t *testing.T) probeTargets {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "signing.nk"), []byte("SUAPROBESEEDTHATMUSTNOTLEAK"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "admin-token"), []byte("admin-probe-token"), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-accepted
	})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The parent's environ is readable by its own user: the probe's
	// denial is the confinement's, not the file's mode.
	_, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", os.Getpid()))
	require.NoError(t, err)
	return probeTargets{
		Data:    filepath.Join(dir, "signing.nk"),
		Token:   filepath.Join(dir, "admin-token"),
		Passwd:  "/etc/passwd",
		Environ: fmt.Sprintf("/proc/%d/environ", os.Getpid()),
		Addr:    ln.Addr().String(),
		Parent:  strconv.Itoa(os.Getpid()),
	}
}

const probeScript = `function run(a) {
  return {
    data: __probe("open", a.data),
    token: __probe("open", a.token),
    passwd: __probe("open", a.passwd),
    environ: __probe("open", a.environ),
    threads: __probe("open-threads", a.passwd),
    inet: __probe("socket", "inet"),
    inet6: __probe("socket", "inet6"),
    unix: __probe("socket", "unix"),
    netlink: __probe("socket", "netlink"),
    dial: __probe("dial", a.addr),
    kill: __probe("kill", a.parent),
    fork: __probe("fork", ""),
    spawn: __probe("spawn", ""),
  };
}`

// runProbes runs every probe in a process of p and returns the outcomes
// by name.
func runProbes(t *testing.T, p *Pool, targets probeTargets) map[string]string {
	t.Helper()
	args, err := json.Marshal(targets)
	require.NoError(t, err)
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(ok(t, run(t, p, probeScript, string(args)))), &out))
	for _, k := range sortedKeys(out) {
		t.Logf("%-8s %s", k, out[k])
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func requireDenied(t *testing.T, out map[string]string, name string, errnos ...string) {
	t.Helper()
	got := out[name]
	require.True(t, strings.HasPrefix(got, "denied"), "%s was not refused: %s", name, got)
	if len(errnos) > 0 {
		var match bool
		for _, e := range errnos {
			match = match || strings.HasPrefix(got, "denied: "+e+":")
		}
		require.True(t, match, "%s: %s, want one of %v", name, got, errnos)
	}
}

// TestConfinedChild runs code inside a sandbox process, past goja, that
// tries to read the data dir, /etc/passwd and the parent's environ, open
// sockets, connect to the parent's listener, signal the parent and start a process:
// the kernel refuses each.
func TestConfinedChild(t *testing.T) {
	t.Parallel()
	abi := kernelConfinement(t)
	p := probePool(t)
	out := runProbes(t, p, newProbeTargets(t))
	for _, name := range []string{"data", "token", "passwd", "environ", "threads"} {
		requireDenied(t, out, name, "EPERM", "EACCES")
	}
	for _, name := range []string{"inet", "inet6", "unix", "netlink", "dial", "kill", "fork", "spawn"} {
		requireDenied(t, out, name, "EPERM")
	}

	// What the process says confines it, and what /proc says: a filter
	// on every thread.
	c := onlyChild(t, p)
	t.Logf("sandbox process: %s", c.confined)
	require.True(t, c.confined.seccomp)
	require.Equal(t, min(abi, 11), c.confined.landlock, c.confined.note)
	dir := "/proc/" + strconv.Itoa(c.cmd.Process.Pid)
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	require.NoError(t, err)
	for _, task := range tasks {
		st := procStatus(t, filepath.Join(dir, "task", task.Name()))
		require.Equal(t, "2", st["Seccomp"], "thread %s has no seccomp filter", task.Name())
	}

	// The process still serves.
	require.Equal(t, `"ok"`, ok(t, run(t, p, `function run() { return "ok" }`, "")))
}

// TestConfineLayers shows that each protection holds alone: seccomp
// without Landlock (what a kernel without Landlock gives), and Landlock
// without seccomp where the kernel has it.
func TestConfineLayers(t *testing.T) {
	t.Parallel()
	abi := kernelConfinement(t)
	targets := newProbeTargets(t)
	t.Run("seccomp", func(t *testing.T) {
		t.Parallel()
		p := probePool(t)
		p.spec += ";confine=" + strconv.Itoa(int(layerSeccomp))
		out := runProbes(t, p, targets)
		for _, name := range []string{"data", "token", "passwd", "environ", "threads", "inet", "inet6", "unix", "netlink", "dial", "kill", "fork", "spawn"} {
			requireDenied(t, out, name, "EPERM")
		}
		c := onlyChild(t, p)
		require.True(t, c.confined.seccomp)
		require.Zero(t, c.confined.landlock)
	})
	t.Run("landlock", func(t *testing.T) {
		t.Parallel()
		if abi == 0 {
			t.Skip("this kernel has no Landlock; the seccomp case shows what holds without it")
		}
		p := probePool(t)
		p.spec += ";confine=" + strconv.Itoa(int(layerLandlock))
		out := runProbes(t, p, targets)
		for _, name := range []string{"data", "token", "passwd", "environ", "threads", "spawn"} {
			requireDenied(t, out, name, "EACCES")
		}
		if abi >= 4 {
			requireDenied(t, out, "dial", "EACCES")
		} else {
			t.Logf("Landlock ABI %d does not restrict TCP: only seccomp keeps sockets out", abi)
		}
		c := onlyChild(t, p)
		require.False(t, c.confined.seccomp)
		require.Equal(t, min(abi, 11), c.confined.landlock)
	})
}

// TestConfineRefusedOutsideTests: only a test binary may ask a sandbox
// process for less than the full confinement.
func TestConfineRefusedOutsideTests(t *testing.T) {
	saved := childTestGlobals
	t.Cleanup(func() { childTestGlobals = saved })
	childTestGlobals = nil
	_, err := parseChildSpec(childSpec{procs: 1, memory: 1, cpu: 1, wall: 1, logBytes: 1, carry: 1}.String() + ";confine=1")
	require.ErrorContains(t, err, "only a test binary")
	s, err := parseChildSpec(childSpec{procs: 1, memory: 1, cpu: 1, wall: 1, logBytes: 1, carry: 1}.String())
	require.NoError(t, err)
	require.Equal(t, layerAll, s.layers)
}

// probePool is a pool of one process whose log (a crash's stderr)
// goes to the test's.
func probePool(t *testing.T) *Pool {
	return newPool(t, Config{PoolSize: 1, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestSeccompPolicyNames: the filter assembles here, and on each
// architecture production runs on every system call it names exists,
// but for the old ones newer architectures replaced (epoll_wait).
func TestSeccompPolicyNames(t *testing.T) {
	t.Parallel()
	policy, err := seccompPolicy(os.Getpid())
	require.NoError(t, err)
	insts, err := policy.Assemble()
	require.NoError(t, err)
	t.Logf("%d BPF instructions for %s", len(insts), runtime.GOARCH)
	optional := map[string]bool{"epoll_wait": true}
	var conditional []string
	for _, c := range seccompConditions(1) {
		conditional = append(conditional, c.Name)
	}
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		for _, list := range [][]string{seccompAllowed, conditional, seccompENOSYS} {
			for _, n := range list {
				if _, ok := info.SyscallNames[n]; !ok {
					require.True(t, optional[n], "%s has no system call %s", info.Name, n)
					t.Logf("%s has no %s: left out", info.Name, n)
				}
			}
		}
	}
}

// onlyChild is p's one sandbox process.
func onlyChild(t *testing.T, p *Pool) *child {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.live, 1)
	for c := range p.live {
		return c
	}
	return nil
}
