package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/redact"
)

// TestExecFrameCarriesNoSecret runs a turn on a stand-in sandbox process,
// a shell script that says hello and records the request frame the pool
// writes to it: the script and args are in it, the secret is not.
func TestExecFrameCarriesNoSecret(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh for the stand-in sandbox process")
	}
	dir := t.TempDir()
	captured := filepath.Join(dir, "frame")
	var e encoder
	e.start(frameHello)
	e.uint(protoVersion)
	e.uint(1) // pid
	e.uint(0) // CPU time
	e.uint(0) // Landlock ABI
	e.byte(1) // seccomp
	e.str("") // note
	var hello strings.Builder
	for _, b := range e.frame() {
		fmt.Fprintf(&hello, `\%03o`, b)
	}
	exe := filepath.Join(dir, "recorder")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%s' >&4\nexec dd bs=1048576 count=1 of=%s <&3 2>/dev/null\n", hello.String(), captured)
	require.NoError(t, os.WriteFile(exe, []byte(script), 0o755))

	p := newPool(t, Config{PoolSize: 1, Executable: exe})
	const secret = "sk-live-frame-5e3c1a"
	const cred, exposed, tenant = "cred-frame-7d6c5b", "exposed-frame-4a3b2c", "tenant-frame-1f2e3d"
	res := execute(t, p, agentfleet.ExecRequest{
		Script: `function run(args) { return "probe-script" }`, Args: []byte(`{"note":"probe-args"}`),
		Secrets: []string{secret},
		Credentials: []agentfleet.OpenSecret{
			{Secret: agentfleet.Secret{Name: "c", Hosts: []string{"api.example.com"}}, Value: cred},
			{Secret: agentfleet.Secret{Name: "e", Expose: true}, Value: exposed},
		},
		TenantSecrets: []agentfleet.OpenSecret{{Secret: agentfleet.Secret{Name: "t"}, Value: tenant}},
	})
	// The stand-in exits after reading: the turn fails as a crash.
	require.NotNil(t, res.Err)
	frame, err := os.ReadFile(captured)
	require.NoError(t, err)
	require.Contains(t, string(frame), "probe-script", "the recorder captured the request")
	require.Contains(t, string(frame), "probe-args")
	for _, v := range []string{secret, cred, exposed, tenant} {
		require.NotContains(t, string(frame), v, "an exposed value is sent only when the script calls secret()")
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	require.Nil(t, newRedactor(nil))
	require.Nil(t, newRedactor(unnamed("")))
	var nilR *redactor
	require.Equal(t, "as is", nilR.str("as is"))

	r := newRedactor(unnamed(`pa"ss\word`, "tok-123"))
	require.Equal(t, "key=[redacted] and [redacted]", r.str(`key=pa"ss\word and tok-123`))
	// In JSON the secret appears escaped.
	require.JSONEq(t, `{"p":"[redacted]","t":["x [redacted]"]}`, string(r.json([]byte(`{"p":"pa\"ss\\word","t":["x tok-123"]}`))))
	// Untouched documents are returned as they are.
	doc := []byte(`{"clean":true}`)
	require.Equal(t, doc, r.json(doc))
	// A numeric secret is redacted structurally, keeping valid JSON.
	num := newRedactor(unnamed("4242"))
	got := num.json([]byte(`{"pin":4242,"list":[1,4242]}`))
	require.JSONEq(t, `{"pin":"[redacted]","list":[1,"[redacted]"]}`, string(got))
}

func TestRedactorCuts(t *testing.T) {
	t.Parallel()
	r := newRedactor(unnamed("sk-live-0123456789"))
	// The head of a cut log ends with the secret's beginning, the tail
	// starts with its end: both pieces go.
	require.Equal(t, "log [redacted]", r.cutEnd("log sk-live-01"))
	require.Equal(t, "[redacted] more", r.cutStart("56789 more"))
	require.Equal(t, "a [redacted]\n… [7 bytes of log cut] …\n[redacted] b", r.logs("a sk-li", "6789 b", 7))
	// Pieces shorter than partialMin are ordinary text.
	require.Equal(t, "ends sk-", r.cutEnd("ends sk-"))
	require.Equal(t, "789", r.cutStart("789"))
	// Whole secrets are redacted as anywhere else.
	require.Equal(t, "[redacted] and [redacted]", r.cutEnd("sk-live-0123456789 and sk-live-0123"))
	var nilR *redactor
	require.Equal(t, "a\n… [1 bytes of log cut] …\nb", nilR.logs("a", "b", 1))
	require.Equal(t, "as is", nilR.message("as is", 0))

	// An error message is redacted before it is capped, and what the
	// process already cut is counted.
	long := strings.Repeat("e", maxErrMessage-5) + "sk-live-0123456789"
	msg := r.message(long, 0)
	require.NotContains(t, msg, "sk-l")
	require.True(t, strings.HasPrefix(msg, strings.Repeat("e", maxErrMessage-5)+"[red"), msg[maxErrMessage-10:])
	require.Contains(t, r.message(strings.Repeat("e", 10)+"sk-live-012", 100), "e[redacted]… [100 bytes cut]")
}

// A secret the log cap cuts in two is redacted on both sides of the cut.
func TestSecretRedactedAcrossLogCut(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	half := LogBytesDefault / 2
	for name, script := range map[string]string{
		// The head's end falls 10 bytes into the secret.
		"head": fmt.Sprintf(`function run(args) { log("a".repeat(%d) + args.key + "b".repeat(%d)) }`, half-10, 2*LogBytesDefault),
		// The tail starts 6 bytes before the secret's end.
		"tail": fmt.Sprintf(`function run(args) { log("x".repeat(%d) + args.key + "y".repeat(%d)) }`, 2*LogBytesDefault, LogBytesDefault-half-6-1),
	} {
		res := execute(t, p, secretRequest(script))
		ok(t, res)
		require.True(t, strings.Contains(res.Logs, "bytes of log cut"), "%s: the log was not cut", name)
		for i := 0; i+partialMin <= len(testSecret); i++ {
			require.False(t, strings.Contains(res.Logs, testSecret[i:i+partialMin]), "%s: %q of the secret is left", name, testSecret[i:i+partialMin])
		}
	}
}

// An error message is redacted before it is capped: the cap cannot
// leave the beginning of a secret.
func TestSecretRedactedBeforeErrorCap(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	// The cap falls 9 bytes into the secret.
	res := execute(t, p, secretRequest(fmt.Sprintf(`function run(args) { throw new Error("e".repeat(%d) + args.key) }`, maxErrMessage-len("Error: ")-9)))
	msg := failed(t, res, agentfleet.ScriptException)
	require.Contains(t, msg, "bytes cut]")
	require.NotContains(t, msg, testSecret[:partialMin])
}

const testSecret = "sk-live-8f7d6c5b4a39"

// secretRequest runs script with the secret in its args and listed.
func secretRequest(script string) agentfleet.ExecRequest {
	return agentfleet.ExecRequest{Script: script, Args: []byte(`{"key":"` + testSecret + `"}`), Secrets: []string{testSecret}}
}

// unnamed is values redacted as "[redacted]".
func unnamed(ss ...string) []redact.Value {
	vs := make([]redact.Value, len(ss))
	for i, s := range ss {
		vs[i] = redact.Value{Value: s}
	}
	return vs
}
