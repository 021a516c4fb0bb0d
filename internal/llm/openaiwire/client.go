// Package openaiwire owns the fleet's client for the OpenAI chat-completions
// wire format: POST {base}/chat/completions, plain or streamed. That one
// format is spoken by OpenAI, OpenRouter, Groq, together, vLLM, Ollama and
// most gateways, so one client serves them all; only the base URL, the key
// and the model name change.
//
// It is the only importer of openai-go in the fleet, and no openai-go type
// crosses its API: callers see agentfleet.ModelRequest/ModelResponse and
// the errors declared here.
//
// The SDK builds and sends streamed requests and reads streams. A plain
// completion is encoded, sent and decoded here, with the URL and headers
// the SDK would use, captured once per Client (sdkRequest): the SDK's
// per-call work cost more than the rest of the call (see Complete). The
// retry policy is ours, and so is the reading of error replies.
// openai-go's own retries are disabled because they cannot be told apart
// from the per-call timeout, they retry statuses we must not (408, 409),
// and their sleeps cannot be injected into tests. Ours:
//   - retry transport errors, timeouts, 429 and 5xx, with exponential
//     backoff and full jitter, up to Config.MaxAttempts attempts;
//   - honour Retry-After (seconds or HTTP-date) and retry-after-ms, but
//     give up at once when the provider asks for longer than
//     Config.MaxRetryAfter, so the caller can park the run instead of
//     holding a worker;
//   - never retry any other 4xx: the error carries status and the
//     provider's message (APIError);
//   - each attempt is bounded by Config.CallTimeout (for a stream, the
//     whole stream); the caller's ctx bounds everything and is honoured
//     immediately, during a request and during a backoff.
//
// A stream is retried only until its first delta reached the caller:
// after that a retry would show the caller the same text twice.
//
// openai-go still applies its environment defaults underneath ours
// (OPENAI_ORG_ID, OPENAI_PROJECT_ID, OPENAI_CUSTOM_HEADERS), to plain
// completions too, as read when the Client was made; the base URL and key
// are always set explicitly from Config.
package openaiwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentfleet/agentfleet"
)

// Defaults of Config; a zero field takes its default.
const (
	// CallTimeoutDefault bounds one attempt. Long replies from slow
	// models take a minute; two minutes without a reply means a stuck
	// connection or an overloaded provider.
	CallTimeoutDefault = 120 * time.Second
	// MaxAttemptsDefault is the first attempt plus three retries.
	MaxAttemptsDefault = 4
	// BackoffBaseDefault is the backoff before the first retry (before
	// jitter); it doubles per retry.
	BackoffBaseDefault = 500 * time.Millisecond
	// BackoffCapDefault bounds the doubled backoff.
	BackoffCapDefault = 30 * time.Second
	// MaxRetryAfterDefault is the longest Retry-After honoured inside a
	// call; a longer one ends the call with the APIError.
	MaxRetryAfterDefault = 60 * time.Second
	// maxIdleConnsPerHost keeps enough warm connections for a worker's
	// concurrent turns to one provider; net/http's default of two
	// would redo TLS handshakes for every turn above two.
	maxIdleConnsPerHost = 32
)

// Config configures a Client. BaseURL and Model are required; the zero
// value of every other field means its default.
type Config struct {
	// BaseURL is the API root including its version path, e.g.
	// https://api.openai.com/v1 or http://localhost:11434/v1.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends no Authorization
	// header (local gateways such as Ollama or vLLM need none).
	APIKey string
	// Model is used when a request names none.
	Model string

	// CallTimeout bounds one attempt (CallTimeoutDefault).
	CallTimeout time.Duration
	// MaxAttempts is the number of attempts including the first
	// (MaxAttemptsDefault); 1 disables retries.
	MaxAttempts int
	// BackoffBase and BackoffCap shape the backoff between attempts
	// (BackoffBaseDefault, BackoffCapDefault).
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// MaxRetryAfter is the longest provider-requested wait honoured
	// inside a call (MaxRetryAfterDefault).
	MaxRetryAfter time.Duration

	// HTTPClient sends the requests; nil means a client of our own with
	// a cloned default transport.
	HTTPClient *http.Client
	// Sleep waits between attempts and must return early with ctx's
	// error when ctx ends. Nil means a timer. Tests inject a recorder.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock used to read HTTP-date Retry-After values; nil
	// means time.Now.
	Now func() time.Time
	// Jitter draws the actual backoff from [0, limit]; nil means uniform
	// random (full jitter). Tests inject a fixed choice.
	Jitter func(limit time.Duration) time.Duration
}

func (c Config) withDefaults() Config {
	if c.CallTimeout == 0 {
		c.CallTimeout = CallTimeoutDefault
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = MaxAttemptsDefault
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = BackoffBaseDefault
	}
	if c.BackoffCap == 0 {
		c.BackoffCap = max(BackoffCapDefault, c.BackoffBase)
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = MaxRetryAfterDefault
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = fullJitter
	}
	return c
}

// LongestCall is the longest one Complete can take with c: every attempt
// running out its CallTimeout, with the longest wait allowed between
// attempts (a backoff or an honoured Retry-After). A budget reservation
// held across a call must outlive it.
func (c Config) LongestCall() time.Duration {
	c = c.withDefaults()
	n := time.Duration(max(c.MaxAttempts, 1))
	return n*c.CallTimeout + (n-1)*max(c.BackoffCap, c.MaxRetryAfter)
}

// validate checks a defaulted Config; its messages say how to fix it.
func (c Config) validate() error {
	u, err := url.Parse(c.BaseURL)
	if c.BaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base URL %q is not an absolute http(s) URL: set it to the API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1", c.BaseURL)
	}
	if c.Model == "" {
		return errors.New("no model: set the model name the provider expects, e.g. gpt-4o-mini or llama3.1")
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("call timeout %s is negative: use 0 for the default (%s) or a positive duration", c.CallTimeout, CallTimeoutDefault)
	}
	if c.MaxAttempts < 0 {
		return fmt.Errorf("max attempts %d is negative: use 1 to disable retries, or 0 for the default (%d)", c.MaxAttempts, MaxAttemptsDefault)
	}
	if c.BackoffBase < 0 || c.BackoffCap < 0 || c.MaxRetryAfter < 0 {
		return errors.New("backoff base, backoff cap and max retry-after must not be negative: use 0 for their defaults")
	}
	if c.BackoffCap < c.BackoffBase {
		return fmt.Errorf("backoff cap %s is below backoff base %s: raise the cap or lower the base", c.BackoffCap, c.BackoffBase)
	}
	return nil
}

// Client calls one OpenAI-wire provider. It is safe for concurrent use.
type Client struct {
	cfg  Config
	oa   openai.Client
	host string
	http *http.Client
	// transport, when the HTTP client is the Client's own, is where
	// requests go (see post).
	transport http.RoundTripper
	// completions is what the SDK would send a plain completion to, and
	// completionHeader the headers it would send (see sdkRequest).
	completions      string
	completionHeader http.Header
}

// New returns a Client for cfg, or an error saying what to fix in cfg.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("openai-wire client: %w", err)
	}
	hc := cfg.HTTPClient
	var transport http.RoundTripper
	if hc == nil {
		transport = newTransport()
		hc = &http.Client{Transport: transport}
	}
	u, _ := url.Parse(cfg.BaseURL) // validated above
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0),
	}
	completions, header, err := sdkRequest(opts)
	if err != nil {
		return nil, fmt.Errorf("openai-wire client: %w", err)
	}
	oa := openai.NewClient(append(opts, option.WithHTTPClient(hc))...)
	return &Client{cfg: cfg, oa: oa, host: u.Host, http: hc, transport: transport, completions: completions, completionHeader: header}, nil
}

// sdkRequest returns the URL and the headers the SDK, configured with
// opts, sends a plain completion with: its own headers, the key, and the
// environment's OPENAI_ORG_ID, OPENAI_PROJECT_ID and
// OPENAI_CUSTOM_HEADERS. Complete sends its requests itself with these:
// the SDK rebuilds them for every call, through a chain of options and
// wrappers that cost a worker more CPU than the HTTP exchange it wraps
// (BenchmarkComplete).
func sdkRequest(opts []option.RequestOption) (endpoint string, header http.Header, err error) {
	var sent *http.Request
	capture := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	})}
	oa := openai.NewClient(append(opts, option.WithHTTPClient(capture))...)
	var reply []byte
	if err := oa.Post(context.Background(), "chat/completions", nil, &reply, option.WithRequestBody("application/json", []byte("{}"))); err != nil {
		return "", nil, fmt.Errorf("prepare requests: %w", err)
	}
	if sent == nil {
		return "", nil, errors.New("prepare requests: the SDK sent no request")
	}
	header = sent.Header.Clone()
	header.Del("Content-Length")
	return sent.URL.String(), header, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newTransport() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		// Someone wrapped the default transport (tracing): keep theirs.
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return inMemoryBody{t}
}

// inMemoryBody sends a request's body from the bytes it was made of. The
// SDK wraps every body in a reader of its own (streamed calls still go
// through it), and net/http writes the headers of a body it cannot see is
// in memory in a system call of their own, before the body: two writes
// per call, and two reads on the other side, for what fits in one.
type inMemoryBody struct{ next http.RoundTripper }

func (t inMemoryBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody == nil || r.ContentLength <= 0 {
		return t.next.RoundTrip(r)
	}
	body, err := r.GetBody()
	if err != nil {
		return t.next.RoundTrip(r)
	}
	// A RoundTripper closes the body it was given and leaves the request
	// as it was: send a shallow copy carrying the fresh body.
	r.Body.Close()
	fresh := *r
	fresh.Body = body
	return t.next.RoundTrip(&fresh)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t inMemoryBody) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Model is the model used when a request names none.
func (c *Client) Model() string { return c.cfg.Model }

// CloseIdleConnections releases the client's kept-alive connections; the
// client stays usable. Owners call it when they are done with the client.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Complete sends req and returns the whole reply.
func (c *Client) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	params, err := c.params(req)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	// The request is sent, and the reply decoded, here, with the URL
	// and headers the SDK would use (sdkRequest): the SDK's reflective
	// encoder, its decoder (which keeps every field's raw JSON) and its
	// per-call request building cost more than the rest of the call
	// (BenchmarkComplete).
	body, err := encodeRequest(plainRequestOf(req, params))
	if err != nil {
		return agentfleet.ModelResponse{}, fmt.Errorf("model request: %w", err)
	}
	var out plainReply
	err = c.retry(ctx, func(ctx context.Context, raw **http.Response) error {
		reply, err := c.post(ctx, body, raw)
		if err != nil {
			return err
		}
		out = plainReply{}
		if err := json.Unmarshal(reply, &out); err != nil {
			// A 200 whose body is not a completion is a gateway
			// glitch; treat it like a transport error.
			return fmt.Errorf("reply is not a chat completion: %w", err)
		}
		if len(out.Choices) == 0 {
			return errors.New("reply has no choices")
		}
		return nil
	})
	if err != nil {
		return agentfleet.ModelResponse{}, c.wrap(params, err)
	}
	msg := out.Choices[0].Message
	content := msg.Content
	if content == "" {
		// A refusal is the model's answer; with no code block the loop
		// takes it as the final one.
		content = msg.Refusal
	}
	var prompt, completion int64
	if u := out.Usage; u != nil {
		prompt, completion = u.PromptTokens, u.CompletionTokens
	}
	resp := c.response(req, params, content, out.Model, prompt, completion, out.Usage != nil)
	resp.FinishReason = out.Choices[0].FinishReason
	return resp, nil
}

// post sends one plain completion request and returns the reply's body.
// A reply with an error status is left in *raw, its body read into
// memory, for retry to classify; the error returned then only says that
// it failed.
func (c *Client) post(ctx context.Context, body []byte, raw **http.Response) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.completions, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	if c.transport != nil {
		// Straight to the transport, with the headers every request
		// shares: a RoundTripper does not change its request, while
		// http.Client.Do copies the headers of every request (the SDK's
		// eleven, a map too large for Go's small-map case) for redirects
		// a completion never gets: 2 KiB and 13 allocations a call
		// (BenchmarkComplete). A redirect is an error here.
		req.Header = c.completionHeader
		resp, err = c.transport.RoundTrip(req)
	} else {
		// A caller's client: its own timeout, jar and redirect policy.
		req.Header = c.completionHeader.Clone()
		resp, err = c.http.Do(req)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body = io.NopCloser(bytes.NewReader(b))
		*raw = resp
		return nil, fmt.Errorf("%s %s: status %d", req.Method, c.completions, resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}

// plainRequest is the body of a plain (not streamed) chat completion: the
// fields params sets, in the wire's names.
type plainRequest struct {
	Model          string         `json:"model"`
	Messages       []plainMessage `json:"messages"`
	MaxTokens      int64          `json:"max_tokens,omitempty"`
	Temperature    *float64       `json:"temperature,omitempty"`
	ResponseFormat *plainFormat   `json:"response_format,omitempty"`
}

type plainMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type plainFormat struct {
	Type string `json:"type"`
}

// encodeRequest encodes r as JSON without HTML escaping: json.Marshal
// writes every <, > and & as a six-byte \u escape, and the prompt's
// TypeScript declarations are full of them (Record<string, string>).
// Nothing renders this body as HTML.
func encodeRequest(r plainRequest) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// plainRequestOf is req as params (already checked) would send it.
func plainRequestOf(req agentfleet.ModelRequest, params openai.ChatCompletionNewParams) plainRequest {
	r := plainRequest{Model: string(params.Model), Messages: make([]plainMessage, len(req.Messages))}
	for i, m := range req.Messages {
		r.Messages[i] = plainMessage{Role: m.Role, Content: m.Content}
	}
	if req.MaxTokens > 0 {
		r.MaxTokens = int64(req.MaxTokens)
	}
	r.Temperature = req.Temperature
	if req.JSON {
		r.ResponseFormat = &plainFormat{Type: "json_object"}
	}
	return r
}

// plainReply is what Complete reads of a chat completion.
type plainReply struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content string `json:"content"`
			Refusal string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// Stream sends req with streaming on, hands each content delta to fn as it
// arrives, and finally calls fn with a Done chunk carrying the assembled
// response. Usage is asked for with stream_options.include_usage; a
// provider that ignores it gets an estimate and UsageReported=false.
//
// fn runs on the caller's goroutine; an error from it ends the call with
// that error. If the call fails after deltas were delivered, the returned
// response holds the text that arrived, with estimated usage, so the
// caller can still account for what the provider charged.
func (c *Client) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if fn == nil {
		fn = func(agentfleet.ModelChunk) error { return nil }
	}
	params, err := c.params(req)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	var resp agentfleet.ModelResponse
	err = c.retry(ctx, func(ctx context.Context, raw **http.Response) error {
		var err error
		resp, err = c.streamOnce(ctx, req, params, raw, fn)
		return err
	})
	if err != nil {
		return resp, c.wrap(params, err)
	}
	return resp, nil
}

// streamOnce is one streamed attempt. Errors after the first delta are
// final: the caller has seen the text and a retry would repeat it.
func (c *Client) streamOnce(ctx context.Context, req agentfleet.ModelRequest, params openai.ChatCompletionNewParams,
	raw **http.Response, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	stream := c.oa.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(raw))
	defer stream.Close()

	var (
		content      strings.Builder
		model        string
		usage        openai.CompletionUsage
		reported     bool
		finished     bool
		finishReason string
	)
	partial := func() agentfleet.ModelResponse {
		return c.response(req, params, content.String(), model, 0, 0, false)
	}
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			usage, reported = chunk.Usage, true
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // we never ask for n > 1
			}
			if choice.FinishReason != "" {
				finished, finishReason = true, choice.FinishReason
			}
			d := choice.Delta.Content
			if d == "" {
				d = choice.Delta.Refusal
			}
			if d == "" {
				continue
			}
			content.WriteString(d)
			if err := fn(agentfleet.ModelChunk{Delta: d}); err != nil {
				return partial(), final(fmt.Errorf("stream consumer: %w", err))
			}
		}
	}
	if err := stream.Err(); err != nil {
		if content.Len() > 0 {
			return partial(), final(fmt.Errorf("stream broke after %d bytes: %w", content.Len(), err))
		}
		return agentfleet.ModelResponse{}, err
	}
	if !finished {
		// The SDK ends a stream quietly when the body ends, [DONE] or
		// not; only a finish_reason says the model was done.
		err := fmt.Errorf("%w: stream ended after %d bytes without a finish_reason", ErrTruncated, content.Len())
		if content.Len() > 0 {
			return partial(), final(err)
		}
		return agentfleet.ModelResponse{}, err
	}
	resp := c.response(req, params, content.String(), model, usage.PromptTokens, usage.CompletionTokens, reported)
	resp.FinishReason = finishReason
	if err := fn(agentfleet.ModelChunk{Done: true, Response: resp}); err != nil {
		return resp, final(fmt.Errorf("stream consumer: %w", err))
	}
	return resp, nil
}

// params maps a ModelRequest to the SDK's request.
func (c *Client) params(req agentfleet.ModelRequest) (openai.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case agentfleet.RoleSystem:
			msgs = append(msgs, openai.SystemMessage(m.Content))
		case agentfleet.RoleUser:
			msgs = append(msgs, openai.UserMessage(m.Content))
		case agentfleet.RoleAssistant:
			msgs = append(msgs, openai.AssistantMessage(m.Content))
		case "developer":
			msgs = append(msgs, openai.DeveloperMessage(m.Content))
		default:
			return openai.ChatCompletionNewParams{}, fmt.Errorf("model request: message %d has role %q: use system, user or assistant", i, m.Role)
		}
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(model), Messages: msgs}
	if req.MaxTokens > 0 {
		// max_tokens, not max_completion_tokens: every OpenAI-wire
		// gateway accepts it, while the newer name is OpenAI-only.
		p.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	if req.JSON {
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	}
	return p, nil
}

// response assembles a ModelResponse. Usage counts only when the provider
// sent it and it is not all zeros (some gateways send zeros rather than
// nothing); otherwise it is estimated and marked unreported.
func (c *Client) response(req agentfleet.ModelRequest, params openai.ChatCompletionNewParams, content, model string,
	prompt, completion int64, reported bool) agentfleet.ModelResponse {
	if model == "" {
		model = string(params.Model)
	}
	resp := agentfleet.ModelResponse{Content: content, Model: model}
	if reported && prompt+completion > 0 {
		resp.Usage = agentfleet.Usage{PromptTokens: prompt, CompletionTokens: completion}
		resp.UsageReported = true
		return resp
	}
	resp.Usage = agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(req.Messages), CompletionTokens: agentfleet.EstimateTextTokens(content)}
	return resp
}

// wrap adds which model at which provider failed.
func (c *Client) wrap(params openai.ChatCompletionNewParams, err error) error {
	var apiErr *APIError
	if errors.As(err, &apiErr) && modelNotFound(apiErr) {
		// An agent's model the provider does not have: no retry helps.
		err = &agentfleet.ModelUnavailableError{Model: string(params.Model), Err: err,
			Reason: "the provider at " + c.host + " does not have it (" + apiErr.Error() + ")"}
	}
	return fmt.Errorf("chat completion with %s at %s: %w", params.Model, c.host, err)
}

// modelNotFound reports whether the provider refused the request's model:
// OpenAI's code model_not_found, or a 404 that says so (gateways).
func modelNotFound(e *APIError) bool {
	return e.Code == "model_not_found" || e.StatusCode == http.StatusNotFound && strings.Contains(strings.ToLower(e.Message), "model")
}
