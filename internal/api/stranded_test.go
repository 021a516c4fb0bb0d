package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/store"
)

// TestRunRecordedButNotQueued: when NATS refuses a submission's publish,
// the answer is 503 with the recorded run's id and how it will still be
// queued: by submitting it again with the same idempotency key, and by
// the dispatcher's sweep, within its interval and age, while one runs.
func TestRunRecordedButNotQueued(t *testing.T) {
	t.Parallel()
	var sweep *maintain.Stranded
	e := newEnv(t, func(c *api.Config) {
		var err error
		sweep, err = maintain.NewStranded(maintain.StrandedConfig{Store: c.Store, Bus: c.Bus, Interval: time.Hour, After: 2 * time.Minute})
		require.NoError(t, err)
		c.RequeueWithin = sweep.Within
	})
	key := e.tenant("acme")
	require.NoError(t, e.bus.Close())
	submit := func() string {
		return requireError(t, e.do("POST", "/v1/runs", key, map[string]any{"message": "hi", "idempotency_key": "k1"}),
			http.StatusServiceUnavailable, "unavailable", "was recorded but could not be queued",
			"submit it again with the same idempotency_key; submitting it again without one makes a second run")
	}
	require.NotContains(t, submit(), "the dispatcher queues it", "no sweep runs to queue it")

	ctx, cancel := context.WithCancel(e.ctx)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		_ = sweep.Run(ctx)
	}()
	defer func() {
		cancel()
		<-swept
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(submit(), "the dispatcher queues it once NATS is back (within about 1h2m0s), or submit it again")
	}, waitFor, 10*time.Millisecond, "the sweep's interval plus its age threshold")

	l, err := e.store.RunList(e.ctx, store.RunListParams{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, l.Runs, 1, "the same key records one run")
	require.Equal(t, agentfleet.StatusQueued, l.Runs[0].Status)
	require.Contains(t, submit(), "run "+l.Runs[0].ID+" was recorded")
}
