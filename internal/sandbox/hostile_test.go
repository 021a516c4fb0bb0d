package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// Hostile scripts: bytes the store must not choke on, output far past
// the caps, loops on host calls. Each fails or is cut cleanly, within
// bounds, and the process serves the next turn.

// NUL passes through as the valid UTF-8 it is (the store layer replaces
// it); lone surrogates, which JavaScript strings can hold and UTF-8
// cannot, become U+FFFD in text and stay \u escapes in JSON; invalid
// bytes fetched become U+FFFD. Everything the result carries is valid
// UTF-8 and valid JSON.
func TestHostileBytes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte{'b', 0x00, 0xff, 0xfe, 'e'})
	}))
	defer srv.Close()
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	before := childPid(t, p)

	res := execute(t, p, agentfleet.ExecRequest{Script: `function run(args) {
  const body = fetch(args.url).body;
  log("a\u0000b", "\ud800", "x\udc00y", body);
  return {nul: "\u0000", lone: "\ud800", body};
}`, Args: []byte(urlArgs(srv.URL))})
	ok(t, res)
	requireValidText(t, res)
	require.Equal(t, "a\x00b \uFFFD x\uFFFDy b\x00\uFFFD\uFFFDe\n", res.Logs)
	var ret map[string]string
	require.NoError(t, json.Unmarshal(res.Return, &ret))
	require.Equal(t, "\x00", ret["nul"])
	require.Equal(t, "b\x00\uFFFD\uFFFDe", ret["body"])
	require.Contains(t, string(res.Return), `"lone":"\ud800"`, "JSON keeps a lone surrogate escaped")

	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { answer("n\u0000ul") }`})
	ok(t, res)
	require.True(t, res.Answered)
	var answer string
	require.NoError(t, json.Unmarshal(res.Answer, &answer))
	require.Equal(t, "n\x00ul", answer)

	res = execute(t, p, agentfleet.ExecRequest{Script: `function run() { throw new Error("bad\u0000\ud800") }`})
	require.Contains(t, failed(t, res, agentfleet.ScriptException), "Error: bad\x00\uFFFD")
	requireValidText(t, res)
	require.Equal(t, before, childPid(t, p), "the process served every turn")
}

// 64 MiB of log, in one call or in many: the log is cut to its cap
// (head and tail kept), or the turn fails on a limit, and the process
// serves on.
// twoByteRunes is how many 'é' TestHostileLogVolume logs in one call.
var twoByteRunes = map[bool]int{false: 32 << 20, true: 8 << 20}[raceEnabled]

func TestHostileLogVolume(t *testing.T) {
	t.Parallel()
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 20 * time.Second}})
	before := childPid(t, p)
	for _, c := range []struct {
		name, script string
		// mayFail is a limit the turn may hit first, on a slow machine
		// or build; "" means it must succeed.
		mayFail agentfleet.ScriptErrorKind
	}{
		{"one call", `function run() { log("x".repeat(64 << 20)); return 1 }`, ""},
		{"1 MiB calls", `function run() { const s = "y".repeat(1 << 20); for (let i = 0; i < 64; i++) log(s); return 1 }`, ""},
		{"64 KiB console.log calls", `function run() { const s = "z".repeat(65535); for (let i = 0; i < 1024; i++) console.log(s); return 1 }`, ""},
		{"short lines", `function run() { for (let i = 0; i < (64 << 20) / 64; i++) log("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde"); return 1 }`, agentfleet.ScriptTimeout},
		// Not ASCII: goja holds it as 64 MiB of UTF-16, and log()
		// renders it as 64 MiB of UTF-8, near the 256 MiB bound. (A
		// quarter of that under the race detector, whose sandbox
		// process takes half a minute over the whole.)
		{"one call, two-byte runes", fmt.Sprintf(`function run() { log("é".repeat(%d)); return 1 }`, twoByteRunes), agentfleet.ScriptMemory},
	} {
		// The turns are heavy: more time than execute's, on a loaded
		// machine.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := p.Execute(ctx, agentfleet.ExecRequest{Tenant: "tenant-1", RunID: "run-1", Script: c.script})
		cancel()
		require.NoError(t, err, c.name)
		t.Logf("%s: %s, %d bytes of log kept, error %v", c.name, res.Duration.Round(time.Millisecond), len(res.Logs), res.Err)
		requireValidText(t, res)
		require.LessOrEqual(t, len(res.Logs), LogBytesDefault+64, "%s: the log is cut to its cap", c.name)
		if res.Err != nil && c.mayFail != "" {
			failed(t, res, c.mayFail)
			continue
		}
		require.Equal(t, "1", ok(t, res), c.name)
		head, tail, found := strings.Cut(res.Logs, "\n… [")
		require.True(t, found, "%s: the cut is marked", c.name)
		require.NotEmpty(t, head, c.name)
		require.NotEmpty(t, tail, c.name)
	}
	require.Equal(t, "2", ok(t, run(t, p, `function run() { return 2 }`, "")))
	require.Equal(t, before, childPid(t, p), "the process survived every turn")
}

// A script looping on ai() is stopped by the turn's wall-clock limit,
// whatever CPU time it has left, and every call it made is counted.
func TestHostileAILoop(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	ai := func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		calls.Add(1)
		resp := agentfleet.AIResponse{Content: "again", Usage: agentfleet.Usage{PromptTokens: 3, CompletionTokens: 1}}
		select {
		case <-time.After(20 * time.Millisecond): // a model's latency
			return resp, nil
		case <-ctx.Done():
			return resp, ctx.Err()
		}
	}
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: 100 * time.Millisecond, TurnTimeout: 300 * time.Millisecond}})
	res := execute(t, p, agentfleet.ExecRequest{Script: `function run() { for (;;) { try { ai("more") } catch (e) {} } }`, AI: ai})
	require.Contains(t, failed(t, res, agentfleet.ScriptTimeout), "wall-clock time limit of 300ms (including fetch and ai calls)")
	n := calls.Load()
	require.Positive(t, n)
	require.Equal(t, agentfleet.Usage{PromptTokens: 3 * n, CompletionTokens: n}, res.AIUsage, "every call is counted")
	require.Equal(t, "1", ok(t, run(t, p, `function run() { return 1 }`, "")))
}

// requireValidText asserts that what the result carries is valid UTF-8
// and its JSON valid.
func requireValidText(t *testing.T, res agentfleet.ExecResult) {
	t.Helper()
	require.True(t, utf8.ValidString(res.Logs), "logs")
	require.True(t, json.Valid(res.Return), "return %q", res.Return)
	if res.Answered {
		require.True(t, json.Valid(res.Answer), "answer %q", res.Answer)
	}
	if res.Err != nil {
		require.True(t, utf8.ValidString(res.Err.Message), "error message")
	}
}

// childPid starts p's one process, if need be, and returns its pid.
func childPid(t *testing.T, p *Pool) int {
	t.Helper()
	if live, _ := p.Processes(); live == 0 {
		ok(t, run(t, p, `function run() {}`, ""))
	}
	return onlyChildPid(t, p)
}
