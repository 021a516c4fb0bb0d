package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
)

func streamClient(t *testing.T, srv *fakeserver.Server, mode llm.StreamMode) llm.Client {
	t.Helper()
	c, err := llm.New(llm.Config{Model: "fake", BaseURL: srv.URL(), Stream: mode, MaxAttempts: 1})
	require.NoError(t, err)
	return c
}

func startFake(t *testing.T, cfg fakeserver.Config) *fakeserver.Server {
	t.Helper()
	srv, err := fakeserver.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// collect streams one call and returns its deltas.
func collect(t *testing.T, c llm.Client) ([]string, agentfleet.ModelResponse, error) {
	t.Helper()
	var deltas []string
	done := 0
	resp, err := c.Stream(context.Background(), agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{{Role: "user", Content: "hi"}}},
		func(ch agentfleet.ModelChunk) error {
			if ch.Done {
				done++
			} else {
				deltas = append(deltas, ch.Delta)
			}
			return nil
		})
	if err == nil {
		require.Equal(t, 1, done, "one Done chunk")
	}
	return deltas, resp, err
}

// auto streams where the provider does; where it refuses, the call is
// made plain, and the model's later calls go plain at once.
func TestStreamModeAutoFallsBackToAPlainCallAndRemembers(t *testing.T) {
	reply := strings.Repeat("streamed words ", 8)
	srv := startFake(t, fakeserver.Config{Responder: fakeserver.Static(reply, agentfleet.Usage{}), ChunkSize: 10})
	deltas, resp, err := collect(t, streamClient(t, srv, llm.StreamAuto))
	require.NoError(t, err)
	require.Greater(t, len(deltas), 5)
	require.Equal(t, reply, strings.Join(deltas, ""))
	require.Equal(t, reply, resp.Content)

	refusing := startFake(t, fakeserver.Config{Responder: fakeserver.Static(reply, agentfleet.Usage{}), RefuseStream: true})
	c := streamClient(t, refusing, "")
	for range 2 {
		deltas, resp, err = collect(t, c)
		require.NoError(t, err)
		require.Empty(t, deltas)
		require.Equal(t, reply, resp.Content)
	}
	got := refusing.Received()
	require.Len(t, got, 3, "the refused stream, its plain call, then a plain call at once")
	require.Equal(t, []bool{true, false, false}, []bool{got[0].Stream, got[1].Stream, got[2].Stream})
}

// on fails where the provider refuses; off never asks for a stream.
func TestStreamModeOnAndOff(t *testing.T) {
	refusing := startFake(t, fakeserver.Config{Responder: fakeserver.Static("x", agentfleet.Usage{}), RefuseStream: true})
	_, _, err := collect(t, streamClient(t, refusing, llm.StreamOn))
	require.ErrorContains(t, err, "400")

	srv := startFake(t, fakeserver.Config{Responder: fakeserver.Static("plain reply", agentfleet.Usage{})})
	deltas, resp, err := collect(t, streamClient(t, srv, llm.StreamOff))
	require.NoError(t, err)
	require.Empty(t, deltas)
	require.Equal(t, "plain reply", resp.Content)
	require.False(t, srv.Received()[0].Stream)

	_, err = llm.New(llm.Config{Model: "fake", BaseURL: srv.URL(), Stream: "sometimes"})
	require.ErrorContains(t, err, "AGENTFLEET_MODEL_STREAM")
}

// A streamed call observes its time to first token once; a plain one
// observes none.
func TestTimeToFirstTokenIsObservedForStreamedCalls(t *testing.T) {
	srv := startFake(t, fakeserver.Config{Responder: fakeserver.Static(strings.Repeat("y", 100), agentfleet.Usage{}), ChunkSize: 10})
	reg := prometheus.NewPedanticRegistry()
	m := llm.NewMetrics(reg)
	_, _, err := collect(t, m.Instrument(streamClient(t, srv, llm.StreamOn)))
	require.NoError(t, err)
	_, _, err = collect(t, m.Instrument(streamClient(t, srv, llm.StreamOff)))
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var count uint64
	for _, mf := range mfs {
		if mf.GetName() == "gen_ai_server_time_to_first_token_seconds" {
			for _, mm := range mf.GetMetric() {
				count += mm.GetHistogram().GetSampleCount()
			}
		}
	}
	require.Equal(t, uint64(1), count)
}
