package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

// enqueueTenant queues turn 2 of n runs of tenant.
func enqueueTenant(t *testing.T, ctx context.Context, b *bus.Bus, tenant string, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{Tenant: tenant, RunID: fmt.Sprintf("%s-%d", tenant, i), Turn: 2}))
	}
}

// drainWork takes n turns from the workers' queue, acking each, and
// returns them in the order delivered.
func drainWork(t *testing.T, ctx context.Context, work *bus.TurnSource, n int) []bus.Turn {
	t.Helper()
	var out []bus.Turn
	for range n {
		d, err := work.Next(ctx)
		require.NoError(t, err)
		require.NoError(t, d.Ack(ctx))
		out = append(out, d.Turn)
	}
	return out
}

// requireEachOnce checks that turns holds every run of want exactly once.
func requireEachOnce(t *testing.T, turns []bus.Turn, want map[string]int) {
	t.Helper()
	seen := map[string]int{}
	for _, turn := range turns {
		seen[turn.RunID]++
		require.Equal(t, 1, seen[turn.RunID], "run %s forwarded twice", turn.RunID)
	}
	got := map[string]int{}
	for _, turn := range turns {
		got[turn.Tenant]++
	}
	require.Equal(t, want, got)
}

// Fairness holds whatever one tenant's backlog: with a hold of 10 turns,
// tenant a queues 30 before b queues one. a's turns beyond its share of
// the hold go to AF_SPILL, so b's turn is held at once and is the next
// forwarded; every turn is forwarded once, and the spill is gone once a's
// turns are all back.
func TestFairnessHoldsBeyondTheHold(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ctx, b, s := newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.Connect(t, bustest.StartServer(t)) },
		Config{Metrics: NewMetrics(reg), HoldMax: 10})
	work := startScheduling(t, ctx, b, s)

	enqueueTenant(t, ctx, b, "a", 30)
	// The workers' queue takes its cushion of a's turns; a's newest
	// turns beyond its share of the hold are spilled.
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "agentfleet_scheduler_spilled_turns_total") >= 30-ReadyDepthDefault-10
	}, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "agentfleet_scheduler_queued_turns") == 30-ReadyDepthDefault
	}, 10*time.Second, 5*time.Millisecond, "held and spilled turns count as queued")
	enqueueTenant(t, ctx, b, "b", 1)
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "agentfleet_scheduler_queued_turns") == 30-ReadyDepthDefault+1
	}, 10*time.Second, 5*time.Millisecond, "b's turn is held")

	got := drainWork(t, ctx, work, ReadyDepthDefault+1)
	require.Equal(t, "b", got[ReadyDepthDefault].Tenant, "after the cushion, b's turn goes first: %v", got)
	got = append(got, drainWork(t, ctx, work, 30-ReadyDepthDefault)...)
	requireEachOnce(t, got, map[string]int{"a": 30, "b": 1})
	require.Eventually(t, func() bool {
		srcs, err := b.TenantSources(ctx, bus.QueueSpill)
		require.NoError(t, err)
		return len(srcs) == 0
	}, 10*time.Second, 10*time.Millisecond, "a's spill source is deleted once drained")
}

// A scheduler that takes over finds the turns its predecessor spilled and
// forwards each once.
func TestSpilledTurnsSurviveASchedulerTakeover(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t)
	reg := prometheus.NewRegistry()
	ctx, b, first := newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.Connect(t, srv) },
		Config{Metrics: NewMetrics(reg), HoldMax: 10})
	work, err := b.TurnSource(ctx, bus.QueueWork, first.cfg.WorkersDurable)
	require.NoError(t, err)
	fctx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(fctx) }()

	enqueueTenant(t, ctx, b, "a", 40)
	require.Eventually(t, func() bool {
		return metricValue(t, reg, "agentfleet_scheduler_spilled_turns_total") >= 40-ReadyDepthDefault-10
	}, 10*time.Second, 5*time.Millisecond)
	stopFirst()
	require.NoError(t, <-firstDone)

	_, _, second := newTestSchedulerOn(t, func(t *testing.T) *bus.Bus { return bustest.Connect(t, srv) }, Config{HoldMax: 10})
	startScheduling(t, ctx, b, second)
	requireEachOnce(t, drainWork(t, ctx, work, 40), map[string]int{"a": 40})
}
