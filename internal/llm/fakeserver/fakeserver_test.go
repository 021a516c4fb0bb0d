package fakeserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	srv    *fakeserver.Server
	client *openaiwire.Client
	mu     sync.Mutex
	waits  []time.Duration
}

// setup starts a fake server and an OpenAI-wire client for it whose
// backoff sleeps are recorded, not slept.
func setup(t *testing.T, cfg fakeserver.Config, mod ...func(*openaiwire.Config)) *bundle {
	t.Helper()
	srv, err := fakeserver.Start(cfg)
	require.NoError(t, err)
	b := &bundle{srv: srv}
	ccfg := openaiwire.Config{
		BaseURL: srv.URL(), APIKey: "sk-fake", Model: "fake-model",
		Sleep: func(ctx context.Context, d time.Duration) error {
			b.mu.Lock()
			b.waits = append(b.waits, d)
			b.mu.Unlock()
			return ctx.Err()
		},
		Jitter: func(limit time.Duration) time.Duration { return limit },
	}
	for _, m := range mod {
		m(&ccfg)
	}
	b.client, err = openaiwire.New(ccfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		b.client.CloseIdleConnections()
		require.NoError(t, srv.Close())
	})
	return b
}

func task(s string) agentfleet.ModelRequest {
	return agentfleet.ModelRequest{MaxTokens: 100, Messages: []agentfleet.ChatMessage{
		{Role: agentfleet.RoleSystem, Content: "system"},
		{Role: agentfleet.RoleUser, Content: s},
	}}
}

func TestCompletionIsServedAndCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{Responder: fakeserver.Static("hi", agentfleet.Usage{PromptTokens: 5, CompletionTokens: 2})})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "a"} {
		resp, err := b.client.Complete(ctx, task(k))
		require.NoError(t, err)
		require.Equal(t, agentfleet.ModelResponse{Content: "hi", Model: "fake-model", FinishReason: "stop",
			Usage: agentfleet.Usage{PromptTokens: 5, CompletionTokens: 2}, UsageReported: true}, resp)
	}
	require.Equal(t, 3, b.srv.Requests())
	require.Equal(t, 3, b.srv.Completions())
	require.Equal(t, 2, b.srv.CompletionsFor("a"))
	require.Equal(t, 1, b.srv.CompletionsFor("b"))

	got := b.srv.Received()[0]
	require.Equal(t, "fake-model", got.Model)
	require.Equal(t, 100, got.MaxTokens)
	require.Equal(t, "Bearer sk-fake", got.Authorization)
	require.Equal(t, task("a").Messages, got.Messages)
	require.False(t, got.Stream)
}

func TestForgetfulServerStillServesAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{Responder: fakeserver.Static("hi", agentfleet.Usage{PromptTokens: 5, CompletionTokens: 2}), Forget: true})
	for range 2 {
		resp, err := b.client.Complete(context.Background(), task("a"))
		require.NoError(t, err)
		require.Equal(t, "hi", resp.Content)
	}
	require.Equal(t, 2, b.srv.Requests())
	require.Equal(t, 2, b.srv.CompletionsFor("a"))
	require.Empty(t, b.srv.Received(), "a forgetful server keeps no requests")
}

func TestStreamingWithAndWithoutUsage(t *testing.T) {
	t.Parallel()
	reply := "Here is the plan.\n\n```javascript\nfunction run(args) { answer(42); }\n```\n"
	for _, omit := range []bool{false, true} {
		b := setup(t, fakeserver.Config{Responder: fakeserver.Static(reply, agentfleet.Usage{PromptTokens: 50, CompletionTokens: 20}),
			OmitUsage: omit, ChunkSize: 7})
		var deltas []string
		resp, err := b.client.Stream(context.Background(), task("q"), func(c agentfleet.ModelChunk) error {
			if !c.Done {
				deltas = append(deltas, c.Delta)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, reply, resp.Content)
		require.Equal(t, reply, strings.Join(deltas, ""))
		require.Greater(t, len(deltas), 5, "streamed in pieces")
		require.Equal(t, !omit, resp.UsageReported)
		if !omit {
			require.Equal(t, agentfleet.Usage{PromptTokens: 50, CompletionTokens: 20}, resp.Usage)
		}
		got := b.srv.Received()[0]
		require.True(t, got.Stream)
		require.True(t, got.IncludeUsage)
	}
}

func TestInjectedFaultsDriveRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{Responder: fakeserver.Static("ok", agentfleet.Usage{})})
	b.srv.Inject(
		fakeserver.Fault{Status: http.StatusTooManyRequests, RetryAfter: "2", Times: 2},
		fakeserver.Fault{Status: http.StatusInternalServerError},
	)
	resp, err := b.client.Complete(context.Background(), task("q"))
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Content)
	require.Equal(t, 4, b.srv.Requests())
	require.Equal(t, 1, b.srv.Completions(), "paid once")
	require.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, openaiwire.BackoffBaseDefault * 4}, b.waits)
	require.True(t, resp.UsageReported, "zero usage from the responder is estimated by the server")
	require.Positive(t, resp.Usage.PromptTokens)
}

func TestResponderStatusError(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{Responder: func(fakeserver.Request) (string, agentfleet.Usage, error) {
		return "", agentfleet.Usage{}, &fakeserver.StatusError{Status: http.StatusNotFound, Message: "model 'x' not found"}
	}})
	_, err := b.client.Complete(context.Background(), task("q"))
	var apiErr *openaiwire.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	require.Equal(t, "model 'x' not found", apiErr.Message)
	require.Equal(t, 1, b.srv.Requests(), "not retried")
	require.Zero(t, b.srv.Completions())
}

func TestHangHitsClientTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{}, func(c *openaiwire.Config) {
		c.CallTimeout = 30 * time.Millisecond
		c.MaxAttempts = 1
	})
	b.srv.Inject(fakeserver.Fault{Hang: true})
	_, err := b.client.Complete(context.Background(), task("q"))
	require.ErrorIs(t, err, openaiwire.ErrCallTimeout)
	require.Zero(t, b.srv.Completions())
}

func TestCloseReleasesHungRequest(t *testing.T) {
	t.Parallel()
	srv, err := fakeserver.Start(fakeserver.Config{})
	require.NoError(t, err)
	srv.Inject(fakeserver.Fault{Hang: true})
	client, err := openaiwire.New(openaiwire.Config{BaseURL: srv.URL(), Model: "m", MaxAttempts: 1, CallTimeout: time.Minute})
	require.NoError(t, err)
	defer client.CloseIdleConnections()

	done := make(chan error, 1)
	go func() {
		_, err := client.Complete(context.Background(), task("q"))
		done <- err
	}()
	require.Eventually(t, func() bool { return srv.Requests() == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	require.NoError(t, srv.Close())
	require.Less(t, time.Since(start), 2*time.Second)
	select {
	case err := <-done:
		require.Error(t, err, "the dropped connection fails the call")
	case <-time.After(5 * time.Second):
		t.Fatal("the client still waits after Close")
	}
}

func TestDemoResponderPlaysOverTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t, fakeserver.Config{})
	req := task("fizzbuzz up to 10")
	first, err := b.client.Complete(context.Background(), req)
	require.NoError(t, err)
	require.Contains(t, first.Content, "[demo model: fizzbuzz 1/2]")
	require.Contains(t, first.Content, "var n = 10;")
	req.Messages = append(req.Messages,
		agentfleet.ChatMessage{Role: agentfleet.RoleAssistant, Content: first.Content},
		agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "Turn 1 ran.\nlog:\ncomputed 10 lines\n"})
	second, err := b.client.Complete(context.Background(), req)
	require.NoError(t, err)
	require.Contains(t, second.Content, "[demo model: fizzbuzz 2/2]")
	require.Contains(t, second.Content, "answer(")
	require.Equal(t, 2, b.srv.CompletionsFor("fizzbuzz up to 10"))
}

func TestRawWire(t *testing.T) {
	t.Parallel()
	srv, err := fakeserver.Start(fakeserver.Config{Responder: fakeserver.Static("pong", agentfleet.Usage{PromptTokens: 1, CompletionTokens: 1})})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := strings.TrimSuffix(srv.URL(), "/v1")

	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		res, err := hc.Post(base+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(res.Body)
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		return res.StatusCode, out
	}

	// Both paths; content as text parts; max_completion_tokens.
	for _, path := range []string{"/v1/chat/completions", "/chat/completions"} {
		code, out := post(path, `{"model":"m","max_completion_tokens":9,"response_format":{"type":"json_object"},`+
			`"messages":[{"role":"user","content":[{"type":"text","text":"pi"},{"type":"text","text":"ng"}]}]}`)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "chat.completion", out["object"])
		require.EqualValues(t, 2, out["usage"].(map[string]any)["total_tokens"])
	}
	got := srv.Received()[1]
	require.Equal(t, "ping", got.Messages[0].Content)
	require.Equal(t, 9, got.MaxTokens)
	require.True(t, got.JSON)

	code, out := post("/v1/chat/completions", `{"model":`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"].(map[string]any)["message"], "not a chat completion request")
	code, _ = post("/v1/chat/completions", `{"model":"m","messages":[]}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, 2, srv.Completions())
	require.Equal(t, 4, srv.Requests())
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	srv, err := fakeserver.Start(fakeserver.Config{})
	require.NoError(t, err)
	require.NoError(t, srv.Close())
	require.NoError(t, srv.Close())
	_, err = http.Get(srv.URL() + "/chat/completions")
	require.Error(t, err, "nothing listens after Close")
}
