package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

// replicasOf is the named stream's entry in b.Replicas.
func replicasOf(t *testing.T, ctx context.Context, b *bus.Bus, stream string) bus.StreamReplicas {
	t.Helper()
	for {
		all, err := b.Replicas(ctx)
		if err == nil {
			for _, r := range all {
				if r.Stream == stream {
					return r
				}
			}
			t.Fatalf("stream %s not among the fleet's: %+v", stream, all)
		}
		require.NoError(t, ctx.Err(), "stream info: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLeader waits until stream has a leader and returns its name.
func waitLeader(t *testing.T, ctx context.Context, b *bus.Bus, stream string) string {
	t.Helper()
	for {
		if r := replicasOf(t, ctx, b, stream); r.Leader != "" {
			return r.Leader
		}
		require.NoError(t, ctx.Err(), "stream %s has no leader", stream)
		time.Sleep(50 * time.Millisecond)
	}
}

// The failure a cluster must survive is a node that does not come back,
// or comes back as a new machine with an empty store. With one replica
// the turns on that node are gone; with three, none is.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		replicas int
		lost     bool
	}{{1, true}, {3, false}} {
		t.Run(fmt.Sprintf("R%d", tc.replicas), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			c := bustest.StartCluster(t, 3)
			b := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) {
				cfg.Replicas = tc.replicas
				cfg.PullExpiry = 500 * time.Millisecond
				cfg.RequestTimeout = 2 * time.Second
			})
			const turns = 20
			for i := range turns {
				require.NoError(t, b.EnqueueTurn(ctx, bus.Turn{Tenant: "acme", RunID: fmt.Sprintf("r%d", i), Turn: 1}))
			}
			runq := b.StreamForTest("runq")
			r := replicasOf(t, ctx, b, runq)
			require.Equal(t, tc.replicas, r.Replicas)
			require.Len(t, r.Peers, tc.replicas-1)

			// The node holding the stream's leader comes back empty...
			first := c.Index(waitLeader(t, ctx, b, runq))
			c.Stop(first)
			c.Start(first, true)
			if tc.replicas > 1 {
				for !replicasOf(t, ctx, b, runq).Current() {
					require.NoError(t, ctx.Err(), "the stream's replicas never became current again")
					time.Sleep(50 * time.Millisecond)
				}
				// ...then the next leader dies for good.
				c.Stop(c.Index(waitLeader(t, ctx, b, runq)))
			}

			got := pullAll(t, ctx, b, turns, 8*time.Second)
			if tc.lost {
				require.Less(t, len(got), turns, "one replica on a node that came back empty keeps nothing")
			} else {
				require.Len(t, got, turns, "three replicas lose no turn to one node replaced and another gone")
			}
		})
	}
}

// pullAll pulls and acks what the turn queue gives within d, retrying
// while the cluster elects leaders, and returns the runs it saw.
func pullAll(t *testing.T, ctx context.Context, b *bus.Bus, want int, d time.Duration) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	got := map[string]bool{}
	var src *bus.TurnSource
	for len(got) < want && ctx.Err() == nil {
		if src == nil {
			var err error
			if src, err = b.TurnSource(ctx, bus.QueueRunQ, "workers"); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		dl, err := src.Next(ctx)
		if err != nil {
			continue // not connected, no leader yet, or nothing more: until the deadline
		}
		got[dl.Turn.RunID] = true
		_ = dl.Ack(ctx)
	}
	return got
}

// A fleet started with a new replicas setting changes the streams only
// through its lease holder's ApplyReplicas; a process with another value
// leaves them as they are.
func TestApplyReplicas(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := bustest.StartCluster(t, 3)
	one := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) { cfg.Replicas = 1; cfg.Name = "r1" })
	lease, err := one.Lease(ctx, "scheduler", 5*time.Second)
	require.NoError(t, err)
	<-lease.Held()
	runq, bucket := one.StreamForTest("runq"), "KV_"+one.LeaseBucketForTest("scheduler")
	require.Equal(t, 1, replicasOf(t, ctx, one, runq).Replicas)

	three := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) { cfg.Replicas = 3; cfg.Name = "r3" })
	require.Equal(t, 1, replicasOf(t, ctx, three, runq).Replicas, "connecting with another value changes nothing")
	_, err = three.Lease(ctx, "scheduler", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, replicasOf(t, ctx, three, bucket).Replicas, "nor does contending for a lease")

	changed, err := three.ApplyReplicas(ctx)
	require.NoError(t, err)
	require.Contains(t, changed, runq)
	require.Contains(t, changed, bucket)
	all, err := three.Replicas(ctx)
	require.NoError(t, err)
	for _, r := range all {
		require.Equal(t, 3, r.Replicas, "stream %s", r.Stream)
	}

	// A process still configured for 1 reconnecting leaves them at 3.
	again := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) { cfg.Replicas = 1; cfg.Name = "r1-again" })
	require.Equal(t, 3, replicasOf(t, ctx, again, runq).Replicas)
	// The workers' consumer of a work queue follows its stream.
	src, err := again.TurnSource(ctx, bus.QueueRunQ, "workers")
	require.NoError(t, err)
	_ = src
	for {
		ci, err := again.JetStreamForTest().Consumer(ctx, runq, "workers")
		require.NoError(t, err)
		if info := ci.CachedInfo(); info.Cluster != nil && len(info.Cluster.Replicas) == 2 {
			break
		}
		require.NoError(t, ctx.Err(), "the consumer never got its replicas")
		time.Sleep(100 * time.Millisecond)
	}
}

func TestReplicasBeyondTheServer(t *testing.T) {
	t.Parallel()
	e := bustest.StartServer(t)
	start := time.Now()
	_, err := bus.Connect(testCtx(t), bus.Config{URL: e.ClientURL(), Replicas: 3})
	require.ErrorIs(t, err, bus.ErrReplicas)
	require.ErrorContains(t, err, "not part of a cluster")
	require.Less(t, time.Since(start), 5*time.Second, "a single server is refused at once")
}

// Given every node, a Bus whose node dies reconnects to a survivor and
// works there.
func TestReconnectsToASurvivor(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := bustest.StartCluster(t, 3)
	b := bustest.ConnectURL(t, c.URL(), func(cfg *bus.Config) { cfg.Replicas = 3; cfg.RequestTimeout = 2 * time.Second })
	first := b.ServerForTest()
	c.Stop(c.Index(first))
	turn := bus.Turn{Tenant: "acme", RunID: "after", Turn: 1}
	for {
		require.NoError(t, b.WaitReady(ctx))
		if err := b.EnqueueTurn(ctx, turn); err == nil {
			break
		}
		require.NoError(t, ctx.Err())
	}
	require.NotEqual(t, first, b.ServerForTest())
	got := pullAll(t, ctx, b, 1, 20*time.Second)
	require.True(t, got["after"], "the turn published after the node died is there")
}

// More replicas than the cluster has nodes fail Connect, once the
// cluster had the time to form.
func TestReplicasBeyondTheCluster(t *testing.T) {
	t.Parallel()
	c := bustest.StartCluster(t, 3)
	_, err := bus.Connect(testCtx(t), bus.Config{URL: c.URL(), Replicas: 5, RequestTimeout: 2 * time.Second})
	require.ErrorIs(t, err, bus.ErrReplicas)
	require.ErrorContains(t, err, "cannot place 5 replicas")
}
