package llm_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

// Not parallel: t.Setenv.
func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name                string
		model, base, key    string
		demo                bool
		wantModel, wantBase string
		wantErr             string
	}{
		{name: "nothing set: demo", demo: true},
		{name: "only a key: still demo", key: "sk-x", demo: true},
		{name: "model demo", model: "demo", base: "http://localhost:11434/v1", demo: true},
		{name: "model demo any case", model: " Demo ", demo: true},
		{name: "only base URL: default model", base: "http://localhost:11434/v1",
			wantModel: llm.ModelDefault, wantBase: "http://localhost:11434/v1"},
		{name: "model and key: OpenAI", model: "gpt-4.1", key: "sk-x", wantModel: "gpt-4.1", wantBase: llm.BaseURLDefault},
		{name: "model and gateway", model: "llama3.1", base: "http://vllm:8000/v1", wantModel: "llama3.1", wantBase: "http://vllm:8000/v1"},
		{name: "OpenAI without key", model: "gpt-4.1", wantErr: "OPENAI_API_KEY is not set"},
		{name: "bad base URL", model: "m", base: "localhost:11434", wantErr: "OPENAI_BASE_URL=\"localhost:11434\" is not an absolute http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(llm.EnvModel, tc.model)
			t.Setenv(llm.EnvBaseURL, tc.base)
			t.Setenv(llm.EnvAPIKey, tc.key)
			cfg := llm.ConfigFromEnv()
			require.Equal(t, tc.demo, llm.IsDemo(cfg))
			c, err := llm.New(cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.demo {
				require.IsType(t, &llm.Demo{}, llm.Unwrap(c))
				require.Equal(t, llm.DemoModelLabel, cfg.String())
				return
			}
			wc, ok := llm.Unwrap(c).(*openaiwire.Client)
			require.True(t, ok, "want the OpenAI-wire client, got %T", c)
			require.Equal(t, tc.wantModel, wc.Model())
			require.Contains(t, cfg.String(), tc.wantBase)
			wc.CloseIdleConnections()
		})
	}
}

func TestConfigNeverPrintsKey(t *testing.T) {
	t.Parallel()
	cfg := llm.Config{Model: "gpt-4.1", APIKey: "sk-secret"}
	for _, s := range []string{cfg.String(), fmt.Sprint(cfg), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg)} {
		require.NotContains(t, s, "sk-secret")
	}
	require.Contains(t, cfg.String(), "API key set")
}

func TestNewValidatesTuning(t *testing.T) {
	t.Parallel()
	_, err := llm.New(llm.Config{Model: "m", BaseURL: "http://localhost:1/v1", MaxAttempts: -1})
	require.ErrorContains(t, err, "use 1 to disable retries")
	_, err = llm.New(llm.Config{DemoLatency: -1})
	require.ErrorContains(t, err, "demo latency")
}
