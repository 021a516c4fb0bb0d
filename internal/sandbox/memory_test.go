package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// waitingForRoom is how many Executes wait for memory.
func (p *Pool) waitingForRoom() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.roomWaiters
}

// holdProcess starts a turn that holds its process in an ai() call until
// release is called (or the test ends), and returns once it does.
func holdProcess(t *testing.T, p *Pool) (result <-chan agentfleet.ExecResult, release func()) {
	t.Helper()
	entered, held := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(held) })
	t.Cleanup(release) // before the pool's Close, which waits for the turn
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		close(entered)
		<-held
		return agentfleet.AIResponse{Content: "held"}, nil
	}
	out := make(chan agentfleet.ExecResult, 1)
	go func() {
		res, _ := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() { return ai("hold") }`, AI: ai})
		out <- res
	}()
	<-entered
	return out, release
}

// With room for one process, a second turn waits for the first one's
// process rather than start another: it runs once that process is idle
// again, or once it is gone.
func TestMemoryTotalWaitsForRoom(t *testing.T) {
	t.Parallel()
	per := ProcessMemory(Limits{})
	for _, end := range []string{"idle", "gone"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			p := newPool(t, Config{PoolSize: 2, MaxProcesses: 4, MemoryTotal: per + per/2})
			first, releaseFirst := holdProcess(t, p)
			firstPid := onlyChildPid(t, p)

			second := make(chan agentfleet.ExecResult, 1)
			go func() {
				res, _ := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() { return 2 }`})
				second <- res
			}()
			require.Eventually(t, func() bool { return p.waitingForRoom() == 1 }, 10*time.Second, time.Millisecond)
			live, _ := p.Processes()
			require.Equal(t, 1, live, "a second process would pass the bound")
			select {
			case res := <-second:
				t.Fatalf("the second turn ran beside the first: %+v", res)
			default:
			}

			switch end {
			case "idle":
				releaseFirst()
				require.Equal(t, `"held"`, ok(t, <-first))
				require.Equal(t, "2", ok(t, <-second))
				require.Equal(t, firstPid, onlyChildPid(t, p), "the second turn ran on the first one's process")
			case "gone":
				// The first turn learns of its process's death when
				// its host call returns.
				require.NoError(t, syscall.Kill(firstPid, syscall.SIGKILL))
				releaseFirst()
				require.NotNil(t, (<-first).Err)
				require.Equal(t, "2", ok(t, <-second))
				require.NotEqual(t, firstPid, onlyChildPid(t, p), "the second turn started a process once the first was reaped")
			}
			charged, total := p.Memory()
			require.Equal(t, per, charged)
			require.Equal(t, per+per/2, total)
		})
	}
}

// Many turns that hold their processes through host calls never run in
// more processes than the bound has room for, and all of them run. Each
// host call waits for a third to be in flight beside it, which only a
// third process could make, and gives up after a while.
func TestMemoryTotalNeverPassed(t *testing.T) {
	t.Parallel()
	per := ProcessMemory(Limits{})
	p := newPool(t, Config{PoolSize: 4, MaxProcesses: 8, MemoryTotal: 2 * per})
	var mu sync.Mutex
	inflight, most := 0, 0
	three := make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == 3 {
			close(three)
		}
		mu.Unlock()
		defer func() { mu.Lock(); inflight--; mu.Unlock() }()
		select {
		case <-three:
		case <-time.After(100 * time.Millisecond):
		}
		return agentfleet.AIResponse{Content: "x"}, nil
	}
	var wg sync.WaitGroup
	results := make([]agentfleet.ExecResult, 8)
	for i := range results {
		wg.Go(func() {
			results[i], _ = p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() { return ai("x") }`, AI: ai})
		})
	}
	wg.Wait()
	for _, res := range results {
		require.Equal(t, `"x"`, ok(t, res))
	}
	require.Equal(t, 2, most, "turns in host calls at once, each holding a process")
	live, _ := p.Processes()
	require.LessOrEqual(t, live, 2)
}

// A turn waiting for room gives up when its context ends, and the pool
// serves on.
func TestMemoryWaitHonoursContext(t *testing.T) {
	t.Parallel()
	per := ProcessMemory(Limits{})
	p := newPool(t, Config{PoolSize: 2, MemoryTotal: per})
	first, releaseFirst := holdProcess(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan agentfleet.ExecResult, 1)
	go func() {
		res, _ := p.Execute(ctx, agentfleet.ExecRequest{Script: `function run() { return 2 }`})
		second <- res
	}()
	require.Eventually(t, func() bool { return p.waitingForRoom() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	failed(t, <-second, agentfleet.ScriptCancelled)
	require.Equal(t, 0, p.waitingForRoom())
	releaseFirst()
	require.Equal(t, `"held"`, ok(t, <-first))
	require.Equal(t, "3", ok(t, run(t, p, `function run() { return 3 }`, "")))
}

func TestMemoryTotalConfig(t *testing.T) {
	t.Parallel()
	per := ProcessMemory(Limits{})
	require.Equal(t, int64(2*MemoryBytesDefault+512<<20+childBaseBytes), per)
	_, err := New(Config{MemoryTotal: per - 1})
	require.ErrorContains(t, err, "MemoryTotal is")
	require.ErrorContains(t, err, "less than one sandbox process can hold")
	p, err := New(Config{MemoryTotal: -1})
	require.NoError(t, err)
	defer p.Close()
	_, total := p.Memory()
	require.Negative(t, total)

	gib := int64(1 << 30)
	for limit, want := range map[int64]int64{
		2 * gib:  2*gib - 512<<20, // at least 512 MiB for the worker
		8 * gib:  6 * gib,         // a quarter
		32 * gib: 30 * gib,        // at most 2 GiB
	} {
		require.Equal(t, want, DefaultMemoryTotal(limit), "limit %d", limit)
	}
	cgroup := func(limit int64) func() (int64, bool) {
		return func() (int64, bool) { return limit, limit > 0 }
	}
	require.Equal(t, 6*gib, memoryTotal(0, per, cgroup(8*gib)))
	// A cgroup with room for less than one process still runs one.
	require.Equal(t, per, memoryTotal(0, per, cgroup(per/2)))
	require.Negative(t, memoryTotal(0, per, cgroup(0)), "no cgroup limit, no bound")
	require.Equal(t, 5*gib, memoryTotal(5*gib, per, cgroup(8*gib)), "configured")
}

func TestMemoryLimitIn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		self  string
		files map[string]string
		want  int64 // -1: none
	}{
		{"v2 with a limit", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "8589934592\n"}, 8 << 30},
		{"v2 without one", "0::/user.slice\n", map[string]string{"user.slice/memory.max": "max\n"}, -1},
		{"v2 limit on an ancestor", "0::/a/b\n", map[string]string{"a/memory.max": "1073741824", "a/b/memory.max": "max"}, 1 << 30},
		// A cgroup namespace: the process sees its own cgroup as the root.
		{"v2 namespaced", "0::/\n", map[string]string{"memory.max": "2147483648"}, 2 << 30},
		{"v1 with a limit", "4:memory:/docker/abc\n3:cpu:/docker/abc\n", map[string]string{"memory/docker/abc/memory.limit_in_bytes": "536870912"}, 512 << 20},
		// v1 says "no limit" with the largest page-aligned number.
		{"v1 without one", "4:memory:/process_api/x\n", map[string]string{"memory/process_api/x/memory.limit_in_bytes": "9223372036854771712"}, -1},
		// The container's own hierarchy mounted at the root, its path
		// in /proc/self/cgroup the host's.
		{"v1 container mount", "9:cpuset,memory:/docker/abc\n", map[string]string{"memory/memory.limit_in_bytes": "1073741824"}, 1 << 30},
		{"no cgroup files", "0::/x\n", nil, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for name, content := range c.files {
				path := filepath.Join(root, name)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
			}
			got, ok := memoryLimitIn(root, c.self)
			if c.want < 0 {
				require.False(t, ok, "limit %d", got)
				return
			}
			require.True(t, ok)
			require.Equal(t, c.want, got)
		})
	}
}
