package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

// answers is a scripted model whose every reply answers the next of
// words in one turn.
func answers(words ...string) *llm.Scripted {
	var rs []llm.Reply
	for _, w := range words {
		rs = append(rs, llm.Reply{Content: "Answering.\n```javascript\nfunction run() { answer(" + strconv.Quote(w) + ") }\n```"})
	}
	return llm.NewScripted(rs...)
}

// devCLI starts a dev fleet on model and points agentctl at its tenant;
// it returns the client and agentctl's runner.
func devCLI(t *testing.T, model *llm.Scripted) (context.Context, *client.Client, func(args ...string) (int, string, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	dev, err := fleet.StartDev(ctx, fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", DataDir: t.TempDir(), Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler), ModelClient: model})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Setenv("AGENTFLEET_URL", dev.URL())
	t.Setenv("AGENTFLEET_TOKEN", dev.TenantKey)
	return ctx, client.New(dev.URL(), dev.TenantKey), func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		code := run(wctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
}

// withChatInput makes s what `agentctl chat` reads.
func withChatInput(t *testing.T, s string) {
	t.Helper()
	prev := chatStdin
	chatStdin = strings.NewReader(s)
	t.Cleanup(func() { chatStdin = prev })
}

var sessionLine = regexp.MustCompile(`(?m)^session (chat-[0-9a-f]{16})(?: \(.*)?$`)

// agentctl chat against a dev fleet: each line is a run of the session,
// its answer printed as it ends; /new starts another session, /exit
// quits before the lines after it; --session continues a session.
func TestChatCLI(t *testing.T) {
	model := answers("one", "two", "three", "four")
	ctx, c, agentctl := devCLI(t, model)

	withChatInput(t, "hello\n\n  and then?  \n/new\nthird\n/exit\nnever sent\n")
	code, stdout, stderr := agentctl("chat")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "one\ntwo\nthree\n", stdout, "each answer as its run ends")
	ids := sessionLine.FindAllStringSubmatch(stderr, -1)
	require.Len(t, ids, 2, stderr)
	first, second := ids[0][1], ids[1][1]
	require.NotEqual(t, first, second, "/new starts another session")
	require.Contains(t, stderr, "continue with: agentctl chat --session "+second)

	v, err := c.GetSession(ctx, "", first)
	require.NoError(t, err)
	require.Len(t, v.Runs, 2)
	require.Equal(t, "hello", v.Runs[0].Message)
	require.Equal(t, "and then?", v.Runs[1].Message, "the line trimmed")
	v, err = c.GetSession(ctx, "", second)
	require.NoError(t, err)
	require.Len(t, v.Runs, 1)
	require.Equal(t, "third", v.Runs[0].Message)

	// --session continues one; the end of the input quits.
	withChatInput(t, "fourth")
	code, stdout, stderr = agentctl("chat", "--session", first)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "four\n", stdout)
	require.Contains(t, stderr, "session "+first)
	require.Zero(t, model.Remaining(), "no run for the line after /exit")

	code, stdout, _ = agentctl("sessions", "show", first)
	require.Equal(t, exitOK, code)
	require.Regexp(t, `(?s)> hello\n  one\n.*> and then\?\n  two\n.*> fourth\n  four\n`, stdout, "the session as a conversation")

	code, _, _ = agentctl("chat", "extra")
	require.Equal(t, exitUsage, code)
}

func llmReply(content string) llm.Reply { return llm.Reply{Content: content} }
