package worker

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// batchCounter is a real store that records the size of every commit
// batch written through it.
type batchCounter struct {
	store.Store
	mu    sync.Mutex
	sizes []int
}

func (s *batchCounter) TurnCommit(ctx context.Context, p store.TurnCommitParams) (store.RunChangeResult, error) {
	s.record(1)
	return s.Store.TurnCommit(ctx, p)
}

func (s *batchCounter) TurnCommitMany(ctx context.Context, ps []store.TurnCommitParams) ([]store.RunChangeResult, []error, error) {
	s.record(len(ps))
	return s.Store.TurnCommitMany(ctx, ps)
}

func (s *batchCounter) record(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes = append(s.sizes, n)
}

func startCommitter(t *testing.T) (*committer, *batchCounter) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "store.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	bc := &batchCounter{Store: st}
	return newCommitter(bc, 64, nil), bc
}

// commitOne commits a turn of a run the store does not have: the store
// answers at once, which is all the committer's timing needs.
func commitOne(c *committer, run string) time.Duration {
	start := time.Now()
	_, _ = c.commit(context.Background(), store.TurnCommitParams{RunID: run, Turn: 1})
	return time.Since(start)
}

// Commits far apart are written at once, each alone: an idle worker's
// turns never wait for company.
func TestCommitterDoesNotDelaySparseCommits(t *testing.T) {
	t.Parallel()
	c, bc := startCommitter(t)
	var took []time.Duration
	for range 20 {
		took = append(took, commitOne(c, "run-sparse"))
		time.Sleep(5 * time.Millisecond)
	}
	slices.Sort(took)
	require.Less(t, took[len(took)/2], commitLinger/2, "median commit time %s", took[len(took)/2])
	require.Equal(t, slices.Repeat([]int{1}, 20), bc.sizes)
}

// Commits arriving four a millisecond (a busy worker) share batches: the
// committer waits a little for the next ones instead of paying a
// transaction for every one or two.
func TestCommitterGathersFrequentCommits(t *testing.T) {
	t.Parallel()
	c, bc := startCommitter(t)
	var wg sync.WaitGroup
	const n = 400
	for i := range n {
		wg.Go(func() { commitOne(c, "run-busy") })
		if i%4 == 3 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	bc.mu.Lock()
	defer bc.mu.Unlock()
	total := 0
	for _, s := range bc.sizes {
		total += s
	}
	require.Equal(t, n, total)
	require.GreaterOrEqual(t, float64(total)/float64(len(bc.sizes)), 4.0, "average batch of %d commits in %d batches", total, len(bc.sizes))
}
