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
	"context"
	"errors"
	"fmt"
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

// Model is the model used when a request names none.
func (c *Client) Model() string { return c.cfg.Model }

// CloseIdleConnections releases the client's kept-alive connections; the
// client stays usable. Owners call it when they are done with the client.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

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
