package loop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/skills"
)

const csvBody = "# CSV totals\n\n1. fetch the file\n2. split lines on commas; the SECRET-STEP-7 is to skip the header\n"

// An imported skill reaches the prompt as one catalog line (never its
// body), and its body reaches the script through skillGet; an agent
// without skills gets the prompt it always had, byte for byte.
func TestStepSkillsCatalog(t *testing.T) {
	t.Parallel()
	lib := skills.NewLibrary(skills.NewIndex([]agentfleet.Skill{
		{Name: "csv-totals", Description: "Sum a column of a CSV file fetched from a URL", Body: csvBody},
		{Name: "pdf-text", Description: "Pull the text out of a PDF document", Body: "# PDF"},
	}), "")
	run := agentfleet.Run{ID: "run-k", Tenant: "acme", Agent: "a", Status: agentfleet.StatusRunning, Message: "add up the amounts column in the CSV at example.org/x.csv"}
	agent := agentfleet.Agent{Name: "a"}

	b := setup(t, llm.Reply{Content: js(`function run() { answer(skillGet("csv-totals")) }`)})
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent, Skills: lib})
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, res.Status)
	require.JSONEq(t, mustJSON(t, csvBody), string(res.Answer), "the body, through skillGet")
	system := b.model.Requests()[0].Messages[0].Content
	require.Contains(t, system, "\n// - csv-totals: Sum a column of a CSV file fetched from a URL\n")
	require.NotContains(t, system, "pdf-text", "a skill with no word of the task is not listed")
	require.Equal(t, 1, strings.Count(system, "csv-totals"), "one line")
	require.NotContains(t, system, "SECRET-STEP-7", "never a body")
	require.Less(t, strings.Index(system, "csv-totals"), strings.Index(system, "// Limits"), "inside the API block")

	plain := setup(t, llm.Reply{Content: "done"})
	_, err = plain.engine.Step(context.Background(), loop.TurnInput{Run: run, Agent: agent})
	require.NoError(t, err)
	require.Equal(t, plain.engine.SystemPrompt(agent), plain.model.Requests()[0].Messages[0].Content, "no skills: the prompt as before")
	require.NotContains(t, plain.model.Requests()[0].Messages[0].Content, "skill")
	withSkills := strings.Replace(system, loop.SkillCatalog([]agentfleet.SkillMatch{
		{Name: "csv-totals", Description: "Sum a column of a CSV file fetched from a URL"},
	}), "", 1)
	require.Equal(t, plain.model.Requests()[0].Messages[0].Content, withSkills, "the catalog is all that differs")
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	return `"` + strings.NewReplacer("\n", `\n`, `"`, `\"`).Replace(s) + `"`
}
