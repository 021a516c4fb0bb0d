package bench_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bench"
)

// The tools scenario on the embedded fleet: a declaration per tool, a
// catalog line cheaper than twelve declarations, and each series of
// calls seen at the server.
func TestTools(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Tools, Runs: 40})
	f := rep.Figures.Tools
	require.NotNil(t, f)
	require.Equal(t, bench.ToolsOnServer, f.ServerTools)
	require.Positive(t, f.DeclCharsMin)
	require.LessOrEqual(t, float64(f.DeclCharsMin), f.DeclCharsPerTool)
	require.LessOrEqual(t, f.DeclCharsPerTool, float64(f.DeclCharsMax))
	require.Positive(t, f.PromptNoTools)
	require.Greater(t, f.PromptDeclared, f.PromptNoTools+bench.ToolsDeclared*f.DeclCharsMin, "each declared tool has its line")
	require.Greater(t, f.PromptCatalog, f.PromptNoTools)
	require.Less(t, f.PromptCatalog, f.PromptDeclared)
	for _, s := range []bench.Summary{f.Direct, f.FleetReadOnly, f.FleetJournaled} {
		require.Equal(t, 39, s.N)
		require.Positive(t, s.P50)
	}
	require.Equal(t, 5, rep.Figures.Runs.Completed, "three prompt runs and two call series")
}
