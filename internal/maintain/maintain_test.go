package maintain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run runs every service until ctx ends, waits for each, and joins
// their errors.
func TestRunWaitsForEveryService(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	boom := errors.New("boom")
	var stopped atomic.Int32
	done := make(chan error)
	go func() {
		done <- Run(ctx,
			Func(func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return nil }),
			Func(func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return boom }),
		)
	}()
	cancel()
	require.ErrorIs(t, <-done, boom)
	require.EqualValues(t, 2, stopped.Load())
}

// A leader-only pass runs only while the process leads; a nil Leading
// always does.
func TestLeaderOnlyPasses(t *testing.T) {
	t.Parallel()
	var passes atomic.Int32
	var leads atomic.Bool
	pass := leader(func() bool { return leads.Load() }, func(context.Context) error { passes.Add(1); return nil })
	require.NoError(t, pass(t.Context()))
	require.Zero(t, passes.Load(), "not leading")
	leads.Store(true)
	require.NoError(t, pass(t.Context()))
	require.EqualValues(t, 1, passes.Load())
	require.NoError(t, leader(nil, func(context.Context) error { passes.Add(1); return nil })(t.Context()))
	require.EqualValues(t, 2, passes.Load())

	ctx, cancel := context.WithCancel(t.Context())
	ticked := make(chan struct{}, 1)
	go func() {
		<-ticked
		cancel()
	}()
	require.NoError(t, every(ctx, time.Millisecond, logger(nil), "test", func(context.Context) error {
		select {
		case ticked <- struct{}{}:
		default:
		}
		return errors.New("logged, not returned")
	}))
}
