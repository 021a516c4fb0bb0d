package openaiwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sleeper records the waits the client asks for and returns at once, so
// retry tests assert on backoff without spending it.
type sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeper) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type bundle struct {
	client *Client
	sleep  *sleeper
	hits   *atomic.Int64
	srv    *httptest.Server
}

// setup starts an httptest server running h and a client for it with
// injected sleep, clock and jitter (always the largest draw).
func setup(t testing.TB, h http.HandlerFunc, mod ...func(*Config)) *bundle {
	t.Helper()
	b := &bundle{sleep: &sleeper{}, hits: &atomic.Int64{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		h(w, r)
	}))
	cfg := Config{
		BaseURL:     b.srv.URL + "/v1",
		APIKey:      "sk-test",
		Model:       "model-default",
		BackoffBase: 100 * time.Millisecond,
		BackoffCap:  time.Second,
		Sleep:       b.sleep.sleep,
		Now:         func() time.Time { return testNow },
		Jitter:      func(limit time.Duration) time.Duration { return limit },
	}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	b.client = c
	t.Cleanup(func() {
		c.CloseIdleConnections()
		b.srv.Close()
	})
	return b
}

var testMessages = []agentfleet.ChatMessage{
	{Role: agentfleet.RoleSystem, Content: "You write JavaScript."},
	{Role: agentfleet.RoleUser, Content: "Compute fizzbuzz."},
	{Role: agentfleet.RoleAssistant, Content: "```javascript\nfunction run(args) {}\n```"},
	{Role: agentfleet.RoleUser, Content: "returned: null"},
}

func writeCompletion(w http.ResponseWriter, content string, withUsage bool) {
	body := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "provider-model-2030",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}},
	}
	if withUsage {
		body["usage"] = map[string]any{"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":{"message":%q,"type":"test_error","code":"test_code"}}`, msg)
}

// writeStream sends deltas as SSE chunks, then a finish_reason chunk
// (unless truncate), a usage chunk (if withUsage) and [DONE].
func writeStream(w http.ResponseWriter, deltas []string, withUsage, truncate bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "provider-model-2030",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, d := range deltas {
		send(chunk(map[string]any{"content": d}, nil))
	}
	if truncate {
		return
	}
	send(chunk(map[string]any{}, "stop"))
	if withUsage {
		send(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "provider-model-2030",
			"choices": []any{}, "usage": map[string]any{"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}})
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestCompleteSendsRequestAndReadsUsage(t *testing.T) {
	t.Parallel()
	var (
		body map[string]any
		hdr  http.Header
		path string
	)
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		path, hdr = r.URL.Path, r.Header.Clone()
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		writeCompletion(w, "hello", true)
	})
	temp := 0.2
	resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{
		Messages: testMessages, MaxTokens: 256, Temperature: &temp, JSON: true,
	})
	require.NoError(t, err)
	require.Equal(t, agentfleet.ModelResponse{
		Content: "hello", Model: "provider-model-2030", FinishReason: "stop",
		Usage: agentfleet.Usage{PromptTokens: 42, CompletionTokens: 7}, UsageReported: true,
	}, resp)

	require.Equal(t, "/v1/chat/completions", path)
	require.Equal(t, "Bearer sk-test", hdr.Get("Authorization"))
	require.Equal(t, "model-default", body["model"], "an empty request model takes the configured one")
	require.EqualValues(t, 256, body["max_tokens"])
	require.InDelta(t, 0.2, body["temperature"], 1e-9)
	require.Equal(t, map[string]any{"type": "json_object"}, body["response_format"])
	require.NotContains(t, body, "stream")
	var msgs []agentfleet.ChatMessage
	raw, _ := json.Marshal(body["messages"])
	require.NoError(t, json.Unmarshal(raw, &msgs))
	require.Equal(t, testMessages, msgs)
	require.Empty(t, b.sleep.recorded())
}

// The prompt's TypeScript declarations are full of <, > and &; the body
// carries them as they are, not as json.Marshal's six-byte escapes.
func TestCompleteSendsMarkupUnescaped(t *testing.T) {
	t.Parallel()
	var raw []byte
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		var err error
		raw, err = io.ReadAll(r.Body)
		require.NoError(t, err)
		writeCompletion(w, "ok", true)
	})
	content := "declare const h: Record<string, string> & {n: 1}; // a < b > c \u2028 é\n"
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{
		Messages: []agentfleet.ChatMessage{{Role: "user", Content: content}},
	})
	require.NoError(t, err)
	require.Contains(t, string(raw), "Record<string, string> & {n: 1}")
	require.NotContains(t, string(raw), `\u003c`)
	var body struct {
		Messages []agentfleet.ChatMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(raw, &body))
	require.Equal(t, content, body.Messages[0].Content)
}

// A request's headers and body leave in one write, although the body
// comes wrapped in a reader net/http cannot see is in memory (as the SDK
// wraps it); without inMemoryBody they take two.
func TestInMemoryBodyWritesRequestOnce(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeCompletion(w, "ok", true)
	}))
	t.Cleanup(srv.Close)
	writes := func(wrap func(http.RoundTripper) http.RoundTripper) int64 {
		var n atomic.Int64
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &writeCountingConn{Conn: c, n: &n}, err
		}}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(bytes.Repeat([]byte("x"), 2000)))
		require.NoError(t, err)
		req.Body = struct{ io.ReadCloser }{req.Body} // opaque, like the SDK's wrapper
		resp, err := (&http.Client{Transport: wrap(tr)}).Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return n.Load()
	}
	require.EqualValues(t, 1, writes(func(rt http.RoundTripper) http.RoundTripper { return inMemoryBody{rt} }))
	require.EqualValues(t, 2, writes(func(rt http.RoundTripper) http.RoundTripper { return rt }))
	_, ok := newTransport().(inMemoryBody)
	require.True(t, ok, "the client's own transport sends bodies from memory")
}

type writeCountingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// Complete sends its requests itself, with what the SDK would send: its
// headers and the environment's organization, project and custom headers.
func TestCompleteSendsTheSDKsHeaders(t *testing.T) {
	t.Setenv("OPENAI_ORG_ID", "org-7")
	t.Setenv("OPENAI_PROJECT_ID", "proj-3")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Gateway: g1\nX-Team: agents")
	var hdr http.Header
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		hdr = r.Header.Clone()
		writeCompletion(w, "ok", true)
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.NoError(t, err)
	require.Equal(t, "org-7", hdr.Get("OpenAI-Organization"))
	require.Equal(t, "proj-3", hdr.Get("OpenAI-Project"))
	require.Equal(t, "g1", hdr.Get("X-Gateway"))
	require.Equal(t, "agents", hdr.Get("X-Team"))
	require.Equal(t, "Bearer sk-test", hdr.Get("Authorization"))
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	require.Contains(t, hdr.Get("User-Agent"), "OpenAI/Go")
}

func TestCompleteRequestModelOverridesDefault(t *testing.T) {
	t.Parallel()
	var model any
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		model = body["model"]
		writeCompletion(w, "ok", true)
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Model: "llama3.1", Messages: testMessages})
	require.NoError(t, err)
	require.Equal(t, "llama3.1", model)
}

func TestNoAPIKeySendsNoAuthorization(t *testing.T) {
	t.Parallel()
	var auth []string
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Values("Authorization")
		writeCompletion(w, "ok", true)
	}, func(c *Config) { c.APIKey = "" })
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.NoError(t, err)
	require.Empty(t, auth)
}

func TestCompleteWithoutUsageEstimates(t *testing.T) {
	t.Parallel()
	for name, usage := range map[string]string{
		"absent": "",
		"null":   `,"usage":null`,
		"zeros":  `,"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":"m",`+
					`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"four"}}]%s}`, usage)
			})
			resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
			require.NoError(t, err)
			require.False(t, resp.UsageReported)
			require.Equal(t, agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(testMessages), CompletionTokens: agentfleet.EstimateTextTokens("four")}, resp.Usage)
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"2"}}, 2 * time.Second},
		{"http-date", http.Header{"Retry-After": {testNow.Add(3 * time.Second).Format(http.TimeFormat)}}, 3 * time.Second},
		{"retry-after-ms wins", http.Header{"Retry-After": {"9"}, "Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					for k, v := range tc.header {
						w.Header()[k] = v
					}
					writeError(w, http.StatusTooManyRequests, "slow down")
					return
				}
				writeCompletion(w, "ok", true)
			})
			resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
			require.NoError(t, err)
			require.Equal(t, "ok", resp.Content)
			require.EqualValues(t, 2, b.hits.Load())
			require.Equal(t, []time.Duration{tc.want}, b.sleep.recorded())
		})
	}
}

func TestServerErrorThenSuccess(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway) // a proxy's bare 502, no JSON
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
			return
		}
		writeCompletion(w, "ok", true)
	})
	resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Content)
	require.EqualValues(t, 2, b.hits.Load())
	require.Equal(t, []time.Duration{100 * time.Millisecond}, b.sleep.recorded(), "first retry waits at most the base")
}

// Concurrent calls share one header map (post): the race detector
// fails this test if sending a request writes to it.
func TestConcurrentCallsShareTheHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")+" "+r.Header.Get("X-Stainless-Lang")]++
		mu.Unlock()
		writeCompletion(w, "ok", true)
	})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 4 {
				_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"Bearer sk-test go": 64}, seen)
}

// A completion is not redirected; a provider that answers one with a
// redirect gets an error at once, not a retry.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			writeCompletion(w, "followed", true)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTemporaryRedirect, apiErr.StatusCode)
	require.EqualValues(t, 1, b.hits.Load())
	require.Empty(t, b.sleep.recorded())
}

func TestClientErrorNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, "Unknown parameter: 'foo'.")
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.Error(t, err)
	require.EqualValues(t, 1, b.hits.Load())
	require.Empty(t, b.sleep.recorded())
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Equal(t, "Unknown parameter: 'foo'.", apiErr.Message)
	require.Equal(t, "test_code", apiErr.Code)
	require.False(t, errors.Is(err, ErrRetriesExhausted))
	require.Contains(t, err.Error(), "400 Bad Request")
	require.Contains(t, err.Error(), "Unknown parameter: 'foo'.")
	require.Contains(t, err.Error(), "model-default", "the error names the model")
}

func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "overloaded")
	}, func(c *Config) {
		c.MaxAttempts = 4
		c.BackoffCap = 300 * time.Millisecond
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorIs(t, err, ErrRetriesExhausted)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	require.EqualValues(t, 4, b.hits.Load())
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond},
		b.sleep.recorded(), "backoff doubles up to the cap")
}

// A connection this process has no file descriptor for is the worker's
// exhaustion, not the provider's: no retry in the call (it would only
// spin), and an error the worker hands the turn back for.
func TestDialOutOfDescriptorsIsExhaustionNotRetried(t *testing.T) {
	t.Parallel()
	var dials atomic.Int64
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
	}}
	b := setup(t, func(w http.ResponseWriter, r *http.Request) { writeCompletion(w, "unreached", true) },
		func(c *Config) { c.HTTPClient = &http.Client{Transport: tr} })
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorIs(t, err, agentfleet.ErrExhausted)
	require.ErrorIs(t, err, syscall.EMFILE)
	require.NotErrorIs(t, err, ErrRetriesExhausted)
	require.EqualValues(t, 1, dials.Load())
	require.Empty(t, b.sleep.recorded())
}

func TestRetryAfterBeyondPatienceReturnsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		writeError(w, http.StatusTooManyRequests, "daily quota reached")
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, time.Hour, apiErr.RetryAfter, "the caller learns when to come back")
	require.EqualValues(t, 1, b.hits.Load())
	require.Empty(t, b.sleep.recorded())
}

func TestRetryWaitPastCallerDeadlineReturnsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, "slow down")
	}, func(c *Config) { c.Now = time.Now })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.client.Complete(ctx, agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorContains(t, err, "would pass the caller's deadline")
	require.EqualValues(t, 1, b.hits.Load())
	require.Empty(t, b.sleep.recorded())
}

// hang blocks until the client gives up, first signalling arrived.
func hang(arrived chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// net/http notices a client hanging up (and cancels r's
		// context) only once the request body has been read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}
}

func TestHungServerHitsCallTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, hang(nil), func(c *Config) {
		c.CallTimeout = 30 * time.Millisecond
		c.MaxAttempts = 2
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorIs(t, err, ErrCallTimeout)
	require.ErrorIs(t, err, ErrRetriesExhausted, "a timeout is retried")
	require.EqualValues(t, 2, b.hits.Load())
}

func TestCancelAbortsRequestPromptly(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	b := setup(t, hang(arrived), func(c *Config) { c.CallTimeout = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	_, err := b.client.Complete(ctx, agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)
	require.EqualValues(t, 1, b.hits.Load(), "a cancelled call is not retried")
}

func TestCancelAbortsBackoffPromptly(t *testing.T) {
	t.Parallel()
	sleeping := make(chan struct{})
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, "slow down")
	}, func(c *Config) {
		// The real sleep, reporting when it starts.
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			close(sleeping)
			return sleep(ctx, d)
		}
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	errRunCancelled := errors.New("run cancelled")
	go func() {
		<-sleeping
		cancel(errRunCancelled)
	}()
	start := time.Now()
	_, err := b.client.Complete(ctx, agentfleet.ModelRequest{Messages: testMessages})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, errRunCancelled, "the canceller's cause is kept")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestTransportErrorRetried(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			_ = conn.Close() // connection reset before any response
			return
		}
		writeCompletion(w, "ok", true)
	})
	resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Content)
	require.EqualValues(t, 2, b.hits.Load())
	require.Len(t, b.sleep.recorded(), 1)
}

func TestUnknownRoleFailsBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) { writeCompletion(w, "ok", true) })
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{
		Messages: []agentfleet.ChatMessage{{Role: "tool", Content: "x"}},
	})
	require.ErrorContains(t, err, `role "tool"`)
	require.Zero(t, b.hits.Load())
}

// collect returns a stream callback that records chunks.
func collect(chunks *[]agentfleet.ModelChunk) func(agentfleet.ModelChunk) error {
	return func(c agentfleet.ModelChunk) error {
		*chunks = append(*chunks, c)
		return nil
	}
}

func deltas(chunks []agentfleet.ModelChunk) []string {
	var out []string
	for _, c := range chunks {
		if !c.Done {
			out = append(out, c.Delta)
		}
	}
	return out
}

func TestStreamAssemblesContentAndUsage(t *testing.T) {
	t.Parallel()
	var body map[string]any
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		writeStream(w, []string{"Hel", "lo, ", "world"}, true, false)
	})
	var chunks []agentfleet.ModelChunk
	resp, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages, MaxTokens: 64}, collect(&chunks))
	require.NoError(t, err)
	want := agentfleet.ModelResponse{
		Content: "Hello, world", Model: "provider-model-2030", FinishReason: "stop",
		Usage: agentfleet.Usage{PromptTokens: 42, CompletionTokens: 7}, UsageReported: true,
	}
	require.Equal(t, want, resp)
	require.Equal(t, []string{"Hel", "lo, ", "world"}, deltas(chunks))
	require.Equal(t, agentfleet.ModelChunk{Done: true, Response: want}, chunks[len(chunks)-1])
	require.Equal(t, true, body["stream"])
	require.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])
	require.EqualValues(t, 64, body["max_tokens"])
}

func TestStreamWithoutUsageEstimates(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeStream(w, []string{"four"}, false, false)
	})
	var chunks []agentfleet.ModelChunk
	resp, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, collect(&chunks))
	require.NoError(t, err)
	require.False(t, resp.UsageReported)
	require.Equal(t, agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(testMessages), CompletionTokens: agentfleet.EstimateTextTokens("four")}, resp.Usage)
	require.Equal(t, resp, chunks[len(chunks)-1].Response)
}

func TestStreamRetriedBeforeFirstDelta(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			writeError(w, http.StatusInternalServerError, "boom")
			return
		}
		writeStream(w, []string{"once"}, true, false)
	})
	var chunks []agentfleet.ModelChunk
	resp, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, collect(&chunks))
	require.NoError(t, err)
	require.Equal(t, "once", resp.Content)
	require.Equal(t, []string{"once"}, deltas(chunks))
	require.EqualValues(t, 2, b.hits.Load())
}

func TestStreamTruncatedAfterDeltaIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeStream(w, []string{"function run(args) {"}, false, true)
	})
	var chunks []agentfleet.ModelChunk
	resp, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, collect(&chunks))
	require.ErrorIs(t, err, ErrTruncated)
	require.EqualValues(t, 1, b.hits.Load(), "the caller saw deltas; a retry would repeat them")
	require.Equal(t, "function run(args) {", resp.Content, "what arrived is returned for accounting")
	require.False(t, resp.UsageReported)
	for _, c := range chunks {
		require.False(t, c.Done)
	}
}

// An error event in the stream, or an event that is not JSON, ends the
// call with an error saying so; after a delta it is final (not retried)
// and what arrived is returned.
func TestStreamErrorAndGarbageEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, event, want string
	}{
		{"error event", `{"error":{"message":"overloaded","type":"server_error"}}`, "received error while streaming"},
		{"not JSON", `{"choices": [`, "a stream event is not JSON"},
		{"not an object", `[1, 2]`, "a stream event is not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				writeStream(w, []string{"half a reply"}, false, true)
				_, _ = fmt.Fprintf(w, "data: %s\n\n", c.event)
			})
			var chunks []agentfleet.ModelChunk
			resp, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, collect(&chunks))
			require.ErrorContains(t, err, c.want)
			require.EqualValues(t, 1, b.hits.Load(), "a delta was delivered: not retried")
			require.Equal(t, "half a reply", resp.Content)
			require.Equal(t, []string{"half a reply"}, deltas(chunks))
		})
	}
}

func TestStreamConsumerErrorEndsCall(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		writeStream(w, []string{"a", "b", "c"}, true, false)
	})
	errStop := errors.New("stop")
	calls := 0
	_, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, func(agentfleet.ModelChunk) error {
		calls++
		return errStop
	})
	require.ErrorIs(t, err, errStop)
	require.Equal(t, 1, calls)
	require.EqualValues(t, 1, b.hits.Load())
}

func TestStreamHungHitsCallTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, hang(nil), func(c *Config) {
		c.CallTimeout = 30 * time.Millisecond
		c.MaxAttempts = 1
	})
	_, err := b.client.Stream(context.Background(), agentfleet.ModelRequest{Messages: testMessages}, collect(new([]agentfleet.ModelChunk)))
	require.ErrorIs(t, err, ErrCallTimeout)
}

func TestBackoffFullJitter(t *testing.T) {
	t.Parallel()
	maxDraw := func(limit time.Duration) time.Duration { return limit }
	for retry, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second} {
		require.Equal(t, want, backoff(time.Second, 8*time.Second, retry, maxDraw), "retry %d", retry)
	}
	require.Equal(t, 8*time.Second, backoff(time.Second, 8*time.Second, 1000, maxDraw), "no overflow")
	for range 200 {
		d := backoff(time.Second, 8*time.Second, 2, fullJitter)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 4*time.Second)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		h     http.Header
		want  time.Duration
		found bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {"0.25"}}, 250 * time.Millisecond, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"negative", http.Header{"Retry-After": {"-3"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"date", http.Header{"Retry-After": {testNow.Add(time.Minute).Format(http.TimeFormat)}}, time.Minute, true},
		{"past date", http.Header{"Retry-After": {testNow.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"huge", http.Header{"Retry-After": {"1e300"}}, time.Duration(1<<63 - 1), true},
		{"ms", http.Header{"Retry-After-Ms": {"20"}}, 20 * time.Millisecond, true},
		{"bad ms falls back", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"1"}}, time.Second, true},
	} {
		got, ok := retryAfter(tc.h, testNow)
		require.Equal(t, tc.found, ok, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
}

func TestProviderMessageShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, msg, code string }{
		{`{"error":{"message":"bad key","type":"auth","code":"invalid_api_key"}}`, "bad key", "invalid_api_key"},
		{`{"error":{"message":"x","code":429}}`, "x", "429"},
		{`{"error":"model 'llama9' not found"}`, "model 'llama9' not found", ""},
		{`{"object":"error","message":"max_tokens too large","type":"BadRequestError"}`, "max_tokens too large", ""},
		{`{"detail":"Not Found"}`, "Not Found", ""},
		{`{"detail":[{"loc":["body"],"msg":"field required"}]}`, `[{"loc":["body"],"msg":"field required"}]`, ""},
		{"  upstream connect error  ", "upstream connect error", ""},
		{strings.Repeat("x", 600), strings.Repeat("x", 500) + "…", ""},
	} {
		msg, _, code := providerMessage([]byte(tc.body))
		require.Equal(t, tc.msg, msg, tc.body)
		require.Equal(t, tc.code, code, tc.body)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	ok := Config{BaseURL: "http://localhost:11434/v1", Model: "llama3.1"}
	_, err := New(ok)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no base URL", func(c *Config) { c.BaseURL = "" }, "not an absolute http(s) URL"},
		{"relative base URL", func(c *Config) { c.BaseURL = "localhost:11434/v1" }, "not an absolute http(s) URL"},
		{"no model", func(c *Config) { c.Model = "" }, "no model"},
		{"negative timeout", func(c *Config) { c.CallTimeout = -time.Second }, "use 0 for the default"},
		{"negative attempts", func(c *Config) { c.MaxAttempts = -1 }, "use 1 to disable retries"},
		{"cap below base", func(c *Config) { c.BackoffBase, c.BackoffCap = time.Second, time.Millisecond }, "raise the cap"},
	} {
		cfg := ok
		tc.mod(&cfg)
		_, err := New(cfg)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

// A refusal is the answer when there is no content; a 200 whose body is
// not a completion, or has no choice, is retried like a transport error.
func TestCompleteReadsRefusalsAndRetriesBrokenReplies(t *testing.T) {
	t.Parallel()
	replies := []string{
		`<html>bad gateway</html>`,
		`{"id":"x","object":"chat.completion","model":"m","choices":[]}`,
		`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop",` +
			`"message":{"role":"assistant","content":null,"refusal":"I cannot help with that."}}],"usage":null}`,
	}
	var n atomic.Int64
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(replies[min(int(n.Add(1))-1, len(replies)-1)]))
	})
	resp, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.NoError(t, err)
	require.Equal(t, "I cannot help with that.", resp.Content)
	require.Equal(t, "m", resp.Model)
	require.False(t, resp.UsageReported, "usage null: estimated")
	require.Positive(t, resp.Usage.PromptTokens)
	require.EqualValues(t, 3, b.hits.Load(), "the broken replies were retried")
}

// A model the provider does not have is a ModelUnavailableError (the
// turn fails saying so), still carrying the provider's APIError.
func TestModelNotFoundIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprint(w, `{"error":{"message":"The model 'gpt-9' does not exist","type":"invalid_request_error","code":"model_not_found"}}`)
	})
	_, err := b.client.Complete(context.Background(), agentfleet.ModelRequest{Model: "gpt-9", Messages: testMessages})
	var mu *agentfleet.ModelUnavailableError
	require.ErrorAs(t, err, &mu)
	require.Equal(t, "gpt-9", mu.Model)
	require.Contains(t, err.Error(), "does not exist")
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.EqualValues(t, 1, b.hits.Load(), "not retried")

	// Another 4xx is not.
	b = setup(t, func(w http.ResponseWriter, r *http.Request) { writeError(w, http.StatusBadRequest, "bad") })
	_, err = b.client.Complete(context.Background(), agentfleet.ModelRequest{Messages: testMessages})
	require.False(t, errors.As(err, &mu))
}
