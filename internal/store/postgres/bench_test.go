package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
)

// BenchmarkTurnLoadConcurrent is what a busy worker's turn loads cost:
// 64 goroutines (32 per core on this machine's two) load turn 2 of 2,000
// runs, each with a turn of history. Loads that meet in a pipeline share
// one statement for the runs and one for their histories.
func BenchmarkTurnLoadConcurrent(b *testing.B) {
	ctx, s, runs := pipelineFixture(b, 2000)
	for i, r := range runs {
		if _, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 1}); err != nil {
			b.Fatal(err)
		}
		_, err := s.TurnCommit(ctx, store.TurnCommitParams{RunID: r.ID, Turn: 1, Status: agentfleet.StatusRunning,
			Args: []byte(`{}`), Steps: []agentfleet.Step{
				{Kind: agentfleet.StepModel, Content: fmt.Sprint("reply ", i), Model: "m"},
				{Kind: agentfleet.StepObservation, Content: "observed"},
			}})
		if err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := runs[int(next.Add(1))%len(runs)]
			if _, err := s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.ID, Turn: 2}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "loads/s")
}

// BenchmarkRunCreateConcurrent is the submission path: 64 goroutines
// create sessionless runs of one tenant that already has backlog runs
// unfinished (queued), as a busy API does. Submissions that meet in a
// pipeline share its round trip. With near, the tenant's max_queued_runs
// is just above what the benchmark creates, so every admission is near
// the cap (where the queue gate counts again once a second instead of
// trusting its count for five).
func BenchmarkRunCreateConcurrent(b *testing.B) {
	for _, c := range []struct {
		backlog int
		near    bool
	}{{0, false}, {20000, false}, {20000, true}} {
		b.Run(fmt.Sprintf("backlog=%d/near=%v", c.backlog, c.near), func(b *testing.B) {
			ctx, s, _ := pipelineFixture(b, 0)
			if c.backlog > 0 {
				require.NoError(b, postgres.InsertQueuedRunsForTest(ctx, s, "acme", c.backlog))
			}
			if c.near {
				_, err := s.TenantUpdate(ctx, store.TenantUpdateParams{ID: "acme", MaxQueuedRuns: ptr(c.backlog + b.N + 100)})
				require.NoError(b, err)
			}
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "task"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
		})
	}
}

// BenchmarkQueueCount is one count of a tenant's unfinished runs: what
// checking max_queued_runs by counting on every submission would add to
// each, at that backlog.
func BenchmarkQueueCount(b *testing.B) {
	for _, backlog := range []int{1000, 20000, 200000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx, s, _ := pipelineFixture(b, 0)
			require.NoError(b, postgres.InsertQueuedRunsForTest(ctx, s, "acme", backlog))
			require.NoError(b, postgres.AnalyzeForTest(ctx, s))
			b.ResetTimer()
			for b.Loop() {
				if _, n, err := postgres.CountQueuedForTest(ctx, s, "acme"); err != nil || n != backlog {
					b.Fatal(n, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
