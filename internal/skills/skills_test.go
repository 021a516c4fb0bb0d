package skills_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/skills"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Summarise the CSV files", "summariz csv fil"},
		{"summarizing a csv file", "summariz csv fil"},
		{"parseURL and skill_get", "pars url skill"},
		{"The stopping of running jobs", "stop run job"},
		{"https://example.org/a.csv", "exampl csv"},
		{"Übersetze die Datei", "übersetz die datei"},
	} {
		require.Equal(t, tc.want, strings.Join(skills.Tokens(tc.in), " "), tc.in)
	}
}

// Search ranks by BM25 and holds to the agents a skill names; the
// near-duplicate rule takes a rewording of a skill's task, not another
// task that shares a word.
func TestSearchAndNearDuplicate(t *testing.T) {
	t.Parallel()
	x := skills.NewIndex([]agentfleet.Skill{
		{Name: "csv-totals", Description: "Sum a column of a CSV file", Body: "split on commas"},
		{Name: "pdf-text", Description: "Pull the text out of a PDF", Agents: []string{"reader"}},
		{Name: "sales-report", Description: "Summarise the quarterly sales CSV at example.org/q1.csv and report revenue per region"},
	})
	hits := x.Search("total of a column in a csv", "", 5)
	require.Equal(t, "csv-totals", hits[0].Skill.Name)
	require.Empty(t, x.Search("text of a pdf", "writer", 5), "pdf-text is the reader's")
	require.Equal(t, "pdf-text", x.Search("text of a pdf", "reader", 5)[0].Skill.Name)
	require.Empty(t, x.Search("the of and", "", 5), "stop words only")

	dup, sim, ok := x.NearDuplicate("Summarize the quarterly sales CSV from example.org/q2.csv and report the revenue by region", "w")
	require.True(t, ok, "similarity %.2f", sim)
	require.Equal(t, "sales-report", dup.Name)
	_, sim, ok = x.NearDuplicate("Sum the sales of a region", "w")
	require.False(t, ok, "similarity %.2f", sim)

	lib := skills.NewLibrary(x, "writer")
	all, err := lib.SkillList(context.Background(), "", 0)
	require.NoError(t, err)
	require.Len(t, all, 2, "by name, the agent's only")
	_, err = lib.SkillGet(context.Background(), "pdf-text")
	require.ErrorContains(t, err, `no skill "pdf-text"`)
}

func TestCompileAndName(t *testing.T) {
	t.Parallel()
	run := agentfleet.Run{ID: "run_0123456789abcdef", Agent: "a", Turn: 2, Message: "Fetch the prices\nand more", Answer: []byte(`"done"`)}
	steps := []agentfleet.Step{
		{Turn: 1, Kind: agentfleet.StepModel, Content: "x\n```javascript\nfunction run() { throw 1 }\n```"},
		{Turn: 1, Kind: agentfleet.StepObservation, Content: "Turn 1 failed (exception): 1\n"},
		{Turn: 2, Kind: agentfleet.StepModel, Content: "y\n```javascript\nfunction run() { answer('done') }\n```"},
		{Turn: 2, Kind: agentfleet.StepObservation, Content: "Turn 2 answered.\n"},
	}
	c := skills.Compile(run, steps)
	require.Equal(t, "fetch-prices", c.Name, "from the first line, without stop words")
	require.Equal(t, "Fetch the prices", c.Description)
	require.Contains(t, c.Body, "answer('done')")
	require.NotContains(t, c.Body, "throw 1", "a failed turn is no part of the recipe")
	require.Equal(t, "run-0123456789abcdef"[:4]+"456789abcdef", skills.NameFor(agentfleet.Run{ID: run.ID, Message: "!!"}))
}
