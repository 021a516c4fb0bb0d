package llm

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

// Environment variables read by ConfigFromEnv (docs/ARCHITECTURE.md §9: users script
// against these names; keep them stable).
const (
	EnvModel   = "AGENTFLEET_MODEL"
	EnvBaseURL = "OPENAI_BASE_URL"
	EnvAPIKey  = "OPENAI_API_KEY"
)

// Defaults of Config.
const (
	// DemoModelName selects the offline demo model in AGENTFLEET_MODEL.
	DemoModelName = "demo"
	// ModelDefault is the model asked for when only OPENAI_BASE_URL is
	// set: small, cheap, and served under this name by OpenAI and by
	// OpenRouter-style gateways (as openai/gpt-4o-mini there, which such
	// users set explicitly anyway).
	ModelDefault = "gpt-4o-mini"
	// BaseURLDefault is OpenAI's API root, used when AGENTFLEET_MODEL
	// names a model but OPENAI_BASE_URL is unset.
	BaseURLDefault = "https://api.openai.com/v1"

	CallTimeoutDefault   = openaiwire.CallTimeoutDefault
	MaxAttemptsDefault   = openaiwire.MaxAttemptsDefault
	BackoffBaseDefault   = openaiwire.BackoffBaseDefault
	BackoffCapDefault    = openaiwire.BackoffCapDefault
	MaxRetryAfterDefault = openaiwire.MaxRetryAfterDefault
)

// Config says which model to talk to. The zero Config selects the demo
// model; zero durations and counts take their defaults.
type Config struct {
	// Model is a model name for the OpenAI-wire client, or "demo".
	Model string
	// BaseURL is the OpenAI-wire API root (…/v1).
	BaseURL string
	// APIKey is the provider's key; local gateways need none.
	APIKey string

	// CallTimeout, MaxAttempts, BackoffBase, BackoffCap and
	// MaxRetryAfter tune the OpenAI-wire client's retries; see
	// openaiwire.Config.
	CallTimeout   time.Duration
	MaxAttempts   int
	BackoffBase   time.Duration
	BackoffCap    time.Duration
	MaxRetryAfter time.Duration

	// Stream says whether model calls stream (AGENTFLEET_MODEL_STREAM);
	// empty is StreamAuto.
	Stream StreamMode

	// DemoLatency is added to every demo model reply, so that benchmarks
	// and demos can look like a real model's pace.
	DemoLatency time.Duration
}

// ConfigFromEnv reads AGENTFLEET_MODEL, OPENAI_BASE_URL and
// OPENAI_API_KEY. Which model they select:
//
//   - AGENTFLEET_MODEL=demo, or neither AGENTFLEET_MODEL nor
//     OPENAI_BASE_URL set: the offline demo model (a bare OPENAI_API_KEY
//     does not switch it on: running up a bill must be asked for by
//     naming a model or a gateway);
//   - otherwise the OpenAI-wire client, with model AGENTFLEET_MODEL
//     (default gpt-4o-mini) at OPENAI_BASE_URL (default
//     https://api.openai.com/v1).
//
// AGENTFLEET_MODEL_STREAM (auto, on, off; default auto) says whether a
// turn's model call streams. Values are trimmed of surrounding space. New
// validates the result.
func ConfigFromEnv() Config {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	return Config{
		Model:   env(EnvModel),
		BaseURL: env(EnvBaseURL),
		APIKey:  env(EnvAPIKey),
		Stream:  StreamMode(env(EnvStream)),
	}
}

// IsDemo reports whether c selects the offline demo model.
func IsDemo(c Config) bool {
	model := strings.TrimSpace(c.Model)
	return strings.EqualFold(model, DemoModelName) || (model == "" && strings.TrimSpace(c.BaseURL) == "")
}

// withDefaults fills the model and base URL of a non-demo config.
func (c Config) withDefaults() Config {
	if IsDemo(c) {
		return c
	}
	if c.Model == "" {
		c.Model = ModelDefault
	}
	if c.BaseURL == "" {
		c.BaseURL = BaseURLDefault
	}
	return c
}

// validate checks a defaulted Config; its messages name the environment
// variable to fix, since that is where users set these.
func (c Config) validate() error {
	if _, err := ParseStreamMode(string(c.Stream)); err != nil {
		return err
	}
	if c.DemoLatency < 0 {
		return fmt.Errorf("demo latency %s is negative: use 0 for none", c.DemoLatency)
	}
	if IsDemo(c) {
		return nil
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s=%q is not an absolute http(s) URL: set it to the API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1 (Ollama)", EnvBaseURL, c.BaseURL)
	}
	if c.APIKey == "" && strings.EqualFold(u.Hostname(), "api.openai.com") {
		return fmt.Errorf("%s is not set but %s=%q needs one: set %s, point %s at a gateway that needs none, or set %s=demo for the offline demo model",
			EnvAPIKey, EnvModel, c.Model, EnvAPIKey, EnvBaseURL, EnvModel)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New(EnvAPIKey + " contains a line break: copy the key again without it")
	}
	return nil
}

// New builds the client cfg selects: the demo model or the OpenAI-wire
// client. The error says what to set to fix the configuration.
func New(cfg Config) (Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("model configuration: %w", err)
	}
	mode, _ := ParseStreamMode(string(cfg.Stream))
	if IsDemo(cfg) {
		return WithStreamMode(&Demo{Latency: cfg.DemoLatency}, mode), nil
	}
	c, err := openaiwire.New(openaiwire.Config{
		BaseURL:       cfg.BaseURL,
		APIKey:        cfg.APIKey,
		Model:         cfg.Model,
		CallTimeout:   cfg.CallTimeout,
		MaxAttempts:   cfg.MaxAttempts,
		BackoffBase:   cfg.BackoffBase,
		BackoffCap:    cfg.BackoffCap,
		MaxRetryAfter: cfg.MaxRetryAfter,
	})
	if err != nil {
		return nil, fmt.Errorf("model configuration: %w", err)
	}
	return WithStreamMode(c, mode), nil
}

// LongestCall is the longest a model call of the client cfg selects can
// take, its retries included.
func LongestCall(cfg Config) time.Duration {
	cfg = cfg.withDefaults()
	if IsDemo(cfg) {
		return cfg.DemoLatency + time.Second
	}
	return openaiwire.Config{
		CallTimeout: cfg.CallTimeout, MaxAttempts: cfg.MaxAttempts,
		BackoffBase: cfg.BackoffBase, BackoffCap: cfg.BackoffCap, MaxRetryAfter: cfg.MaxRetryAfter,
	}.LongestCall()
}

// String describes the selection for a startup log line. The key is never
// printed, only whether one is set, so logging a Config cannot leak it.
func (c Config) String() string {
	c = c.withDefaults()
	if IsDemo(c) {
		return DemoModelLabel
	}
	key := "no API key"
	if c.APIKey != "" {
		key = "API key set"
	}
	return fmt.Sprintf("%s at %s (%s)", c.Model, c.BaseURL, key)
}

// GoString keeps %#v from printing the key either.
func (c Config) GoString() string { return "llm.Config{" + c.String() + "}" }
