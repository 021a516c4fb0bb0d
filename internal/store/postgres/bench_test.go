package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
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
