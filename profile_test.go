package agentfleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

func TestProfileFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		window int
		want   agentfleet.Profile
	}{
		// No window: today's prompt budget and reply cap, the sandbox's log cap.
		{0, agentfleet.Profile{Budget: 24000, Trigger: 18000, Keep: 9000, SummaryTokens: 1500, LogCap: 16384, Reserve: 2048}},
		{2048, agentfleet.Profile{Window: 2048, Budget: 1280, Trigger: 960, Keep: 480, SummaryTokens: 256, LogCap: 512, Reserve: 512}},
		{32768, agentfleet.Profile{Window: 32768, Budget: 26624, Trigger: 19968, Keep: 9984, SummaryTokens: 1664, LogCap: 9984, Reserve: 2048}},
		{128000, agentfleet.Profile{Window: 128000, Budget: 104000, Trigger: 78000, Keep: 39000, SummaryTokens: 4096, LogCap: 39000, Reserve: 8000}},
		// A huge window is capped: every turn pays its whole prompt.
		{10_000_000, agentfleet.Profile{Window: 10_000_000, Budget: agentfleet.BudgetMax, Trigger: 98304, Keep: 49152, SummaryTokens: 4096, LogCap: 49152, Reserve: 8192}},
	} {
		require.Equal(t, c.want, agentfleet.ProfileFor(c.window), "window %d", c.window)
	}
	require.Equal(t, agentfleet.ProfileFor(0), agentfleet.ProfileFor(-5), "no window is the default")
}

// Whatever the window, the prompt and its reply fit it, the summary and
// the kept history fit under the trigger with room to grow, and the
// trigger leaves room for the system prompt.
func TestProfileForHolds(t *testing.T) {
	t.Parallel()
	for w := agentfleet.ContextWindowMin; w <= agentfleet.ContextWindowMax; w = w*5/4 + 1 {
		p := agentfleet.ProfileFor(w)
		require.LessOrEqual(t, p.Budget+p.Reserve, w*7/8+1, "window %d: %+v", w, p)
		require.LessOrEqual(t, p.Budget, agentfleet.BudgetMax)
		require.Less(t, p.Trigger, p.Budget)
		require.Less(t, p.Keep+p.SummaryTokens, p.Trigger, "window %d: a compaction must make room", w)
		require.LessOrEqual(t, p.LogCap, p.Keep*3, "window %d: one turn's logs fit in the kept history", w)
		require.GreaterOrEqual(t, p.Reserve, 512)
		require.Equal(t, w, p.SummaryWindow())
		if prev := agentfleet.ProfileFor(w * 4 / 5); w > agentfleet.ContextWindowMin {
			require.GreaterOrEqual(t, p.Budget, prev.Budget, "a larger window never shrinks the budget")
		}
	}
	d := agentfleet.ProfileFor(0)
	require.Equal(t, d.Budget+d.Reserve, d.SummaryWindow(), "no window: a summary call fits what a turn's call did")
}

func TestProfileFit(t *testing.T) {
	t.Parallel()
	p := agentfleet.ProfileFor(0)
	require.Equal(t, p, p.Fit(2000), "a usual system prompt leaves the default as it is")
	long := p.Fit(20000) // a 32 KiB persona
	require.Equal(t, 4000, long.Trigger, "the history folds before the prompt overflows")
	require.Equal(t, 2000, long.Keep)
	require.Equal(t, p.Budget, long.Budget)
	none := p.Fit(30000)
	require.Zero(t, none.Trigger)
	require.Zero(t, none.Keep)
}

func TestCheckContextWindow(t *testing.T) {
	t.Parallel()
	for _, ok := range []int{0, 2048, 128000, 10_000_000} {
		require.NoError(t, agentfleet.CheckContextWindow(ok), ok)
	}
	for _, bad := range []int{-1, 1, 2047, 10_000_001} {
		err := agentfleet.CheckContextWindow(bad)
		require.ErrorContains(t, err, "context_window", bad)
		require.ErrorContains(t, err, "2048 to 10000000", bad)
	}
}
