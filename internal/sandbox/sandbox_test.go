package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

func TestArgsRoundTrip(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	args := `{"n":1,"s":"héllo \"q\" \u2028","list":[1,2.5,null,true],"nested":{"a":{"b":[]}}}`
	got := ok(t, run(t, p, `function run(args) { return args }`, args))
	require.JSONEq(t, args, got)

	// The first turn has no args: run gets null.
	require.Equal(t, `"null"`, ok(t, run(t, p, `function run(args) { return String(args) }`, "")))
	// undefined is carried as null.
	require.Equal(t, "null", ok(t, run(t, p, `function run() {}`, "")))
	// Computed values come back as JSON.
	require.JSONEq(t, `{"n":2,"d":"x"}`, ok(t, run(t, p, `function run(a) { return {n: a.n + 1, d: "x", f() {}} }`, `{"n":1}`)))
}

func TestFreshStatePerTurn(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 2})
	// Each script checks that nothing of an earlier one is visible, then
	// leaves marks of every kind: a global, a prototype, a builtin.
	script := `function run(args) {
  const leaks = [];
  if (typeof mark !== "undefined") leaks.push("global " + mark);
  if (({}).polluted !== undefined) leaks.push("Object.prototype");
  if (Array.prototype.includes.hacked) leaks.push("Array.prototype.includes");
  if (JSON.stringify.length !== 3) leaks.push("JSON.stringify");
  mark = args.id;
  Object.prototype.polluted = args.id;
  Array.prototype.includes.hacked = true;
  const s = JSON.stringify; JSON.stringify = function() { return s.apply(null, arguments) };
  return {id: args.id, leaks};
}`
	var wg sync.WaitGroup
	results := make([]agentfleet.ExecResult, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = execute(t, p, agentfleet.ExecRequest{Script: script, Args: []byte(fmt.Sprintf(`{"id":%d}`, i)), Tenant: fmt.Sprintf("tenant-%d", i%3)})
		}()
	}
	wg.Wait()
	for i, res := range results {
		require.JSONEq(t, fmt.Sprintf(`{"id":%d,"leaks":[]}`, i), ok(t, res), "run %d", i)
	}
	// And sequentially, on the processes the concurrent runs used.
	for i := range 4 {
		require.JSONEq(t, fmt.Sprintf(`{"id":%d,"leaks":[]}`, 100+i), ok(t, run(t, p, script, fmt.Sprintf(`{"id":%d}`, 100+i))))
	}
}

func TestAnswer(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)

	res := run(t, p, `function run() { answer("the answer"); }`, "")
	ok(t, res)
	require.True(t, res.Answered)
	require.Equal(t, `"the answer"`, string(res.Answer))

	res = run(t, p, `function run() { answer({total: 3, items: ["a", "b"]}); }`, "")
	ok(t, res)
	require.True(t, res.Answered)
	require.JSONEq(t, `{"total":3,"items":["a","b"]}`, string(res.Answer))

	// answer ends the script: not even catch or finally runs after it.
	res = run(t, p, `function run() {
  try { answer(1); log("after answer"); } catch (e) { log("caught", e); } finally { log("finally"); }
  log("after try");
  return 2;
}`, "")
	ok(t, res)
	require.True(t, res.Answered)
	require.Equal(t, "1", string(res.Answer))
	require.Empty(t, res.Logs)

	// At top level too, and a later value change does not matter.
	res = run(t, p, `const v = {a: 1}; answer(v); v.a = 2; function run() { return 5 }`, "")
	ok(t, res)
	require.True(t, res.Answered)
	require.JSONEq(t, `{"a":1}`, string(res.Answer))

	// No answer: Answered stays false.
	res = run(t, p, `function run() { return 1 }`, "")
	require.False(t, res.Answered)
	require.Nil(t, res.Answer)
}

func TestScriptErrors(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	cases := []struct {
		name, script string
		kind         agentfleet.ScriptErrorKind
		want         []string
	}{
		{"throw Error", "function run() {\n  const x = 1;\n  throw new Error('boom');\n}", agentfleet.ScriptException, []string{"Error: boom", "line 3:"}},
		{"type error", "function run(args) {\n  return args.missing.field;\n}", agentfleet.ScriptException, []string{"TypeError", "missing", "line 2:"}},
		{"throw string", "function run() { throw 'plain' }", agentfleet.ScriptException, []string{"plain"}},
		{"throw object", "function run() { throw {code: 42} }", agentfleet.ScriptException, []string{`{"code":42}`}},
		{"custom error name", "class MyErr extends Error { constructor(m) { super(m); this.name = 'MyErr' } }\nfunction run() { throw new MyErr('mine') }", agentfleet.ScriptException, []string{"MyErr: mine", "line 1:"}},
		{"syntax", "function run(args) {\n  return 1 +;\n}", agentfleet.ScriptSyntax, []string{"SyntaxError", "line 2:"}},
		{"no run", "const x = 1;", agentfleet.ScriptSyntax, []string{"defines no run function"}},
		{"run not a function", "var run = 3;", agentfleet.ScriptSyntax, []string{"not a function"}},
		{"top level throws", "throw new Error('early');\nfunction run() {}", agentfleet.ScriptException, []string{"Error: early", "line 1:"}},
		{"recursion", "function f(n) { return f(n + 1) + 1 }\nfunction run() { return f(0) }", agentfleet.ScriptException, []string{"Maximum call stack size exceeded"}},
		{"unserializable return", "function run() { const a = {}; a.self = a; return a }", agentfleet.ScriptException, []string{"cannot be serialized as JSON"}},
		{"assert", "function run() { assert(1 === 2, 'one is not two') }", agentfleet.ScriptException, []string{"AssertionError: Assertion failed: one is not two"}},
		{"rejected async", "async function run() { throw new Error('async boom') }", agentfleet.ScriptException, []string{"async boom"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			msg := failed(t, run(t, p, c.script, ""), c.kind)
			for _, w := range c.want {
				require.Contains(t, msg, w)
			}
			// Messages are for the model: no Go or goja internals.
			for _, bad := range []string{"goja", ".go:", "goroutine", "github.com", "(*"} {
				require.NotContains(t, msg, bad)
			}
		})
	}
}

func TestAsyncRunResolves(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	require.Equal(t, "3", ok(t, run(t, p, `async function run() { const x = await Promise.resolve(2); return x + 1 }`, "")))
}

func TestLogs(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := run(t, p, `function run() {
  log("a", 1, true, null, undefined, {x: [1, "y"]});
  console.log("log");
  console.info("info");
  console.warn("careful");
  console.error("bad", new TypeError("oops"));
  log(function named() {});
  const c = {}; c.c = c; log(c);
}`, "")
	ok(t, res)
	require.Equal(t, `a 1 true null undefined {"x":[1,"y"]}
log
info
[warn] careful
[error] bad TypeError: oops
[Function]
[unserializable object: Converting circular structure to JSON]
`, res.Logs)
}

func TestLogCapKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{LogBytes: 1024}})
	res := run(t, p, `function run() { for (let i = 0; i < 2000; i++) log("line " + i); return 1 }`, "")
	ok(t, res)
	logs := res.Logs
	require.True(t, strings.HasPrefix(logs, "line 0\nline 1\n"), "head kept: %q", logs[:40])
	require.True(t, strings.HasSuffix(logs, "line 1998\nline 1999\n"), "tail kept: %q", logs[len(logs)-40:])
	require.Regexp(t, `\n… \[\d+ bytes of log cut\] …\n`, logs)
	require.NotContains(t, logs, "line 1000\n")
	require.LessOrEqual(t, len(logs), 1024+64)

	// Under the cap, nothing is cut.
	res = run(t, p, `function run() { log("short") }`, "")
	require.Equal(t, "short\n", res.Logs)
}

func TestCarryCap(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CarryBytes: 4096}})
	msg := failed(t, run(t, p, `function run() { return {rows: Array.from({length: 500}, (_, i) => ({i, pad: "xxxxxxxx"}))} }`, ""), agentfleet.ScriptLimit)
	require.Contains(t, msg, "limit for the value carried to the next turn is 4 KiB")
	require.Contains(t, msg, "Return less")

	msg = failed(t, run(t, p, `function run() { answer("y".repeat(10000)) }`, ""), agentfleet.ScriptLimit)
	require.Contains(t, msg, "answer() got")

	// Just under the cap is fine.
	ok(t, run(t, p, `function run() { return "z".repeat(4000) }`, ""))
}

func TestSecretsRedacted(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	secret := "sk-live-8f7d6c5b"
	req := func(script string) agentfleet.ExecRequest {
		return agentfleet.ExecRequest{Script: script, Args: []byte(`{"key":"` + secret + `"}`), Secrets: []string{secret, ""}}
	}
	res := execute(t, p, req(`function run(args) {
  log("key is", args.key, {nested: args.key});
  return {key: args.key, list: ["prefix-" + args.key], [args.key]: 1};
}`))
	ok(t, res)
	require.NotContains(t, res.Logs, secret)
	require.NotContains(t, string(res.Return), secret)
	require.Contains(t, res.Logs, "key is [redacted]")
	require.JSONEq(t, `{"key":"[redacted]","list":["prefix-[redacted]"],"[redacted]":1}`, string(res.Return))

	res = execute(t, p, req(`function run(args) { answer("the key is " + args.key) }`))
	require.Equal(t, `"the key is [redacted]"`, string(res.Answer))

	res = execute(t, p, req(`function run(args) { throw new Error("bad key " + args.key) }`))
	msg := failed(t, res, agentfleet.ScriptException)
	require.NotContains(t, msg, secret)
	require.Contains(t, msg, "bad key [redacted]")

	// A secret that is a JSON number is redacted without breaking the
	// carried JSON.
	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { return {pin: 982451653, s: "982451653"} }`, Secrets: []string{"982451653"}})
	require.True(t, json.Valid(res.Return), "%s", res.Return)
	require.NotContains(t, string(res.Return), "982451653")
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	cpu := 300 * time.Millisecond
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: cpu}})
	// Start the sandbox process first: its start-up, slow on a loaded
	// machine, is not part of the deadline being measured.
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))
	start := time.Now()
	res := run(t, p, `function run() { let i = 0; while (true) { i++ } }`, "")
	elapsed := time.Since(start)
	msg := failed(t, res, agentfleet.ScriptTimeout)
	require.Contains(t, msg, "CPU time limit of 300ms")
	require.Contains(t, msg, "line 1:")
	require.GreaterOrEqual(t, elapsed, cpu)
	require.NotContains(t, msg, "killed", "stopped by the child's own deadline, not the parent's kill")
	// The process survives an interrupted script and serves again.
	require.Equal(t, "7", ok(t, run(t, p, `function run() { return 7 }`, "")))
}

func TestHardKillOnStuckNativeCall(t *testing.T) {
	t.Parallel()
	cpu := 100 * time.Millisecond
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: cpu}})
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))
	// A backtracking regexp (minutes at this length) runs in native code,
	// where no interrupt is seen: only the parent's kill ends it.
	start := time.Now()
	res := run(t, p, `function run() { return /(a+)+(?!b)c/.test("a".repeat(40)) }`, "")
	elapsed := time.Since(start)
	msg := failed(t, res, agentfleet.ScriptTimeout)
	require.Contains(t, msg, "sandbox process was killed")
	// The kill comes after cpu+killGrace of the process's CPU time,
	// later in wall time on a loaded machine; the regexp alone would
	// take minutes.
	require.GreaterOrEqual(t, elapsed, cpu+killGrace)
	require.Less(t, elapsed, 30*time.Second)
	require.Equal(t, "8", ok(t, run(t, p, `function run() { return 8 }`, "")))
}

func TestMemoryBound(t *testing.T) {
	t.Parallel()
	// A generous CPU limit: this test is about memory, on a loaded machine.
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{MemoryBytes: 64 << 20, CPUTime: 30 * time.Second}})
	cases := []struct{ name, script string }{
		// One allocation far past RLIMIT_AS: the process dies, the turn
		// fails cleanly, the pool replaces the process.
		{"huge repeat", `function run() { return 'x'.repeat(2**36).length }`},
		// Gradual growth: the heap watcher interrupts the script.
		{"push loop", `function run() { const a = []; while (true) a.push({i: a.length, row: new Array(1024).fill(a.length)}) }`},
		{"string doubling", `function run() { let s = "x"; while (true) s += s }`},
	}
	for _, c := range cases {
		start := time.Now()
		msg := failed(t, run(t, p, c.script, ""), agentfleet.ScriptMemory)
		t.Logf("%s: stopped after %s: %s", c.name, time.Since(start).Round(time.Millisecond), msg)
		require.Contains(t, msg, "memory limit of 64 MiB", c.name)
		// The parent is alive (this test runs in it) and the pool serves.
		require.Equal(t, "9", ok(t, run(t, p, `function run() { return 9 }`, "")), "after %s", c.name)
	}
}

// TestMemoryGarbageNotCounted allocates several times the bound in
// short-lived garbage while holding a modest live set: the GC, not the
// watcher, deals with it.
func TestMemoryGarbageNotCounted(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{MemoryBytes: 64 << 20, CPUTime: 30 * time.Second}})
	res := run(t, p, `function run() {
  const keep = new Array(200000).fill(0).map((_, i) => i);  // ~ a few MiB live
  let sum = 0;
  for (let i = 0; i < 400; i++) {                            // ~ 300 MiB of garbage
    const tmp = new Float64Array(100000);
    tmp[i] = i;
    sum += tmp[i];
  }
  return sum + keep.length;
}`, "")
	require.Equal(t, "279800", ok(t, res))
}

func TestCancel(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		close(started)
		return agentfleet.AIResponse{Content: "go"}, nil
	}
	p := newPool(t, Config{PoolSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-started
		cancel()
	}()
	start := time.Now()
	res, err := p.Execute(ctx, agentfleet.ExecRequest{Script: `function run() { ai("signal"); while (true) {} }`, AI: ai})
	require.NoError(t, err)
	failed(t, res, agentfleet.ScriptCancelled)
	require.Less(t, time.Since(start), CPUTimeDefault, "interrupted, not timed out")
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))

	// An already-cancelled context never starts the script.
	res, err = p.Execute(ctx, agentfleet.ExecRequest{Script: `function run() { return 1 }`})
	require.NoError(t, err)
	failed(t, res, agentfleet.ScriptCancelled)
}

func TestCancelDuringHostCall(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		close(started)
		<-ctx.Done()
		return agentfleet.AIResponse{}, ctx.Err()
	}
	p := newPool(t, Config{PoolSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-started
		cancel()
	}()
	// The script even catches the failed call; the turn is cancelled anyway.
	res, err := p.Execute(ctx, agentfleet.ExecRequest{Script: `function run() { try { ai("slow") } catch (e) { return "caught" } }`, AI: ai})
	require.NoError(t, err)
	failed(t, res, agentfleet.ScriptCancelled)
}

func TestTurnWallTimeout(t *testing.T) {
	t.Parallel()
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		<-ctx.Done()
		return agentfleet.AIResponse{}, ctx.Err()
	}
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 200 * time.Millisecond, TurnTimeout: 400 * time.Millisecond}})
	start := time.Now()
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { ai("never answers") }`, AI: ai})
	msg := failed(t, res, agentfleet.ScriptTimeout)
	require.Contains(t, msg, "wall-clock time limit of 400ms")
	require.Less(t, time.Since(start), 400*time.Millisecond+killGrace)
}

// A host call that ignores its context cannot hold a turn past its
// wall-clock limit: the turn stops within a grace of it, failing as the
// model is told (kind timeout, naming the wall-clock limit), and the
// pool serves on.
func TestTurnWallTimeoutWithHostCallIgnoringContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		<-release // a stuck client that never looks at ctx
		return agentfleet.AIResponse{Content: "late"}, nil
	}
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 200 * time.Millisecond, TurnTimeout: 400 * time.Millisecond}})
	t.Cleanup(func() { close(release) }) // before Close, which waits for the call
	start := time.Now()
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { for (;;) { try { ai("slow") } catch (e) {} } }`, AI: ai})
	elapsed := time.Since(start)
	msg := failed(t, res, agentfleet.ScriptTimeout)
	require.Contains(t, msg, "wall-clock time limit of 400ms")
	require.Less(t, elapsed, 400*time.Millisecond+2*killGrace)
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))
}

func TestHostCallTimeNotCountedAsCPU(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	calls := 0
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		calls++
		select {
		case <-release:
		case <-time.After(150 * time.Millisecond):
		}
		return agentfleet.AIResponse{Content: "ok"}, nil
	}
	// Four calls of 150ms each exceed the 300ms CPU limit in wall time,
	// but the script itself computes almost nothing.
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 300 * time.Millisecond}})
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { for (let i = 0; i < 4; i++) ai("x"); return "done" }`, AI: ai})
	require.Equal(t, `"done"`, ok(t, res))
	require.Equal(t, 4, calls)
}

func TestPoolWaitsForFreeProcess(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		close(started)
		<-release
		return agentfleet.AIResponse{Content: "done"}, nil
	}
	p := newPool(t, Config{PoolSize: 1, MaxProcesses: 1})
	first := make(chan agentfleet.ExecResult, 1)
	go func() {
		res, _ := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() { return ai("block") }`, AI: ai})
		first <- res
	}()
	<-started
	// The only process is busy: a second Execute waits until its
	// context gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := p.Execute(ctx, agentfleet.ExecRequest{Script: `function run() { return 1 }`})
	require.NoError(t, err)
	failed(t, res, agentfleet.ScriptCancelled)
	close(release)
	require.Equal(t, `"done"`, ok(t, <-first))
}

func TestClose(t *testing.T) {
	t.Parallel()
	p, err := New(Config{PoolSize: 2})
	require.NoError(t, err)
	ok(t, run(t, p, `function run() { return 1 }`, ""))

	started := make(chan struct{})
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		close(started)
		return agentfleet.AIResponse{Content: "x"}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() { ai("s"); while (true) {} }`, AI: ai})
		done <- err
	}()
	<-started
	require.NoError(t, p.Close())
	require.ErrorIs(t, <-done, ErrClosed, "a running Execute ends with ErrClosed")
	_, err = p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() {}`})
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, p.Close(), "Close twice")
}

func TestUnknownPrimitive(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	_, err := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() {}`, Primitives: []string{"log", "shell"}})
	require.ErrorContains(t, err, `unknown primitive(s) shell`)
	require.Error(t, CheckPrimitives([]string{"fetch", "nope"}))
	require.NoError(t, CheckPrimitives(DefaultPrimitives()))
}

func TestNotASandboxBinary(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Executable: "/bin/true"})
	_, err := p.Execute(context.Background(), agentfleet.ExecRequest{Script: `function run() {}`})
	require.Error(t, err)
	require.Contains(t, err.Error(), "must import the sandbox package")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Limits: Limits{MemoryBytes: 1 << 20, CPUTime: time.Microsecond}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "Limits.MemoryBytes")
	require.Contains(t, err.Error(), "Limits.CPUTime")
	require.Contains(t, err.Error(), "use 0 for the default")
	_, err = New(Config{PoolSize: -1})
	require.ErrorContains(t, err, "PoolSize")
}

func TestDeclarations(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	d := p.Declarations(nil, false)
	t.Logf("default declarations: %d bytes\n%s", len(d), d)
	require.LessOrEqual(t, len(d), 3000, "declarations go into every system prompt")
	for _, name := range DefaultPrimitives() {
		if name == "http" || name == "markdown" {
			require.Contains(t, d, "require(m: '"+name+"')")
			continue
		}
		require.Contains(t, d, name)
	}
	require.Contains(t, d, "Limits per turn: 5s CPU, 256 MiB memory")

	// Only what is enabled is declared, core always.
	d = p.Declarations([]string{"http"}, false)
	require.Contains(t, d, "declare function answer")
	require.Contains(t, d, "require(m: 'http')")
	require.Contains(t, d, "type Res =", "http's types are declared without fetch")
	require.NotContains(t, d, "declare function fetch")
	require.NotContains(t, d, "declare function ai(")
}

// TestProcessDeathMidTurn kills the sandbox process from outside while a
// script runs: a crash is reported as such, a SIGKILL the pool did not
// send as the kernel's OOM killer would, and either way the pool replaces
// the process.
func TestProcessDeathMidTurn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig  syscall.Signal
		kind agentfleet.ScriptErrorKind
		want string
	}{
		{syscall.SIGQUIT, agentfleet.ScriptException, "sandbox process crashed (exit status 2)"},
		{syscall.SIGKILL, agentfleet.ScriptMemory, "memory limit"},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			t.Parallel()
			p := newPool(t, Config{PoolSize: 1})
			started := make(chan struct{})
			ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
				close(started)
				return agentfleet.AIResponse{Content: "x"}, nil
			}
			go func() {
				<-started
				p.mu.Lock()
				defer p.mu.Unlock()
				for ch := range p.live {
					_ = ch.cmd.Process.Signal(c.sig)
				}
			}()
			res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { ai("s"); while (true) {} }`, AI: ai})
			require.Contains(t, failed(t, res, c.kind), c.want)
			require.Equal(t, "2", ok(t, run(t, p, `function run() { return 2 }`, "")))
		})
	}
}
