package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet"
)

// BenchmarkExecute measures whole turns through a warm pool of one
// process: request frame, fresh runtime, compile, run, result frame.
func BenchmarkExecute(b *testing.B) {
	// A worker passes its provider key as a secret every turn: the
	// "-secret" cases pay for redacting the outcome.
	secret := []string{"sk-proj-4f8e2a1c9b7d6e5f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d"}
	cases := []struct {
		name, script, args string
		secrets            []string
	}{
		{name: "tiny", script: `function run(args) { log("turn", args.n); return {n: args.n + 1} }`, args: `{"n":1}`},
		{name: "carry200", script: `function run(args) {
  const items = [];
  for (let i = 0; i < 200; i++) items.push({id: i, name: "item " + i, price: i * 1.25, tags: ["a" + i % 7, "b" + i % 3]});
  return {items};
}`, args: `null`},
		// BenchmarkTurn/carry200 of internal/loop: 200 items in, 200 out.
		{name: "reprice200", script: carry200Script, args: string(carry200Args())},
		{name: "tiny-secret", script: `function run(args) { log("turn", args.n); return {n: args.n + 1} }`, args: `{"n":1}`, secrets: secret},
		{name: "reprice200-secret", script: carry200Script, args: string(carry200Args()), secrets: secret},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(Config{PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			req := agentfleet.ExecRequest{Script: c.script, Args: []byte(c.args), Tenant: "t", RunID: "r", Secrets: c.secrets}
			ctx := context.Background()
			// Start the process outside the measurement.
			if res, err := p.Execute(ctx, req); err != nil || res.Err != nil {
				b.Fatalf("warm-up: %v %v", err, res.Err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuNow() + childCPU(p)
			for b.Loop() {
				res, err := p.Execute(ctx, req)
				if err != nil || res.Err != nil {
					b.Fatalf("%v %v", err, res.Err)
				}
			}
			// Both sides of the pipe: what a turn costs, however busy
			// the machine is.
			b.ReportMetric(float64(cpuNow()+childCPU(p)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// carry200Args is the carried value of BenchmarkTurn/carry200 in
// internal/loop: 200 items {id, name, price, tags[2]}.
func carry200Args() []byte {
	var b []byte
	b = append(b, '[')
	for i := range 200 {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"id":%d,"name":"item %d","price":%g,"tags":["a","b"]}`, i, i, float64(i)*1.25)
	}
	return append(b, ']')
}

const carry200Script = `function run(args) {
  var out = [];
  for (var i = 0; i < args.length; i++) {
    var it = args[i];
    out.push({id: it.id, name: it.name, price: it.price * 2, tags: [it.tags[0], it.tags[1]]});
  }
  log("repriced " + out.length);
  return out;
}`

// BenchmarkRunTurn measures what a sandbox process does for one turn,
// in this process and without the pipes: fresh runtime, compile, args
// in, run, return value out. It is the part of BenchmarkExecute that
// scripts and carried state make expensive.
func BenchmarkRunTurn(b *testing.B) {
	cases := []struct {
		name, script string
		args         []byte
	}{
		{"tiny", `function run(args) { log("turn", args.n); return {n: args.n + 1} }`, []byte(`{"n":1}`)},
		{"carry200", carry200Script, carry200Args()},
	}
	// Collect as lazily as a sandbox process does (childMain).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := newTestChild()
			b.ReportAllocs()
			defer cpuMeter(b)()
			for b.Loop() {
				m := execMsg{seq: 1, prims: coreSet, script: c.script, args: c.args}
				res := s.runTurn(&turnCtl{seq: 1}, &m)
				if res.errKind != 0 {
					b.Fatal(res.errMsg)
				}
				s.spare = s.newEnv()
			}
		})
	}
}

// newTestChild is a sandbox process's server, in this process, for
// running turns directly.
func newTestChild() *childServer {
	spec := childSpec{procs: 1, memory: MemoryBytesDefault, cpu: CPUTimeDefault, wall: 2 * CPUTimeDefault, logBytes: LogBytesDefault, carry: CarryBytesDefault}
	return &childServer{spec: spec, limits: spec.limits(), heap: newHeapSamples()}
}

// cpuMeter reports the process CPU time per op (user+sys, GC workers
// included), which a loaded machine disturbs less than wall time.
func cpuMeter(b *testing.B) func() {
	start := cpuNow()
	return func() {
		b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuNow() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// childCPU is the CPU time the pool's processes have used, in ns, from
// /proc (Linux; elsewhere 0), in clock ticks of 10 ms.
func childCPU(p *Pool) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var total int64
	for c := range p.live {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
		if err != nil {
			continue
		}
		// After "pid (comm) ": state, then utime and stime are the
		// 12th and 13th fields.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += (ut + st) * int64(10*time.Millisecond)
	}
	return total
}

// BenchmarkFetchBoundTurns runs 64 turns at a time whose scripts each
// wait 20ms on fetch, as a 64-slot worker's fan-out agents do, on a pool
// of 2 places with 2 processes (every turn holds its process through its
// fetch) and with 64.
func BenchmarkFetchBoundTurns(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	args := []byte(`{"url":"` + srv.URL + `"}`)
	for _, procs := range []int{2, 64} {
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			p, err := New(Config{PoolSize: 2, MaxProcesses: procs, Network: NetworkConfig{Allow: loopback}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			req := agentfleet.ExecRequest{Script: `function run(args) { return fetch(args.url).body; }`, Args: args, Tenant: "t"}
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := p.Execute(context.Background(), req)
					if err != nil || res.Err != nil {
						b.Errorf("%v %v", err, res.Err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
		})
	}
}
