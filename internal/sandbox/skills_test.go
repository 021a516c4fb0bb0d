package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// fakeSkills is a two-skill library.
type fakeSkills struct{}

func (fakeSkills) SkillList(_ context.Context, query string, _ int) ([]agentfleet.SkillMatch, error) {
	if query == "" {
		return []agentfleet.SkillMatch{{Name: "csv", Description: "parse CSV"}, {Name: "pdf", Description: "read PDF"}}, nil
	}
	return []agentfleet.SkillMatch{{Name: "csv", Description: "parse CSV", Score: 1.5}}, nil
}

func (fakeSkills) SkillGet(_ context.Context, name string) (string, error) {
	if name != "csv" {
		return "", fmt.Errorf("no skill %q", name)
	}
	return "# CSV\nsplit on commas", nil
}

// skillList and skillGet reach the caller's library; without one they
// are not defined.
func TestSkillPrimitives(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	res := execute(t, p, agentfleet.ExecRequest{Skills: fakeSkills{}, Script: `function run() {
  return {all: skillList(), some: skillList("csv files"), body: skillGet("csv")};
}`})
	require.JSONEq(t, `{"all":[{"name":"csv","description":"parse CSV","score":0},{"name":"pdf","description":"read PDF","score":0}],
		"some":[{"name":"csv","description":"parse CSV","score":1.5}],"body":"# CSV\nsplit on commas"}`, ok(t, res))
	msg := failed(t, execute(t, p, agentfleet.ExecRequest{Skills: fakeSkills{}, Script: `function run() { return skillGet("nope") }`}), agentfleet.ScriptException)
	require.Contains(t, msg, `skillGet: no skill "nope"`)
	msg = failed(t, execute(t, p, agentfleet.ExecRequest{Script: `function run() { return skillList() }`}), agentfleet.ScriptException)
	require.Contains(t, msg, "skillList is not defined")
	require.NotContains(t, p.Declarations(nil, false), "skillList", "the default declarations are as before")
	require.NotContains(t, DefaultPrimitives(), "skillList")
}

// Every global a script has is a name no skill may take.
func TestReservedSkillNamesCoverPrimitives(t *testing.T) {
	t.Parallel()
	for _, p := range prims {
		if p.name == "" {
			continue
		}
		require.True(t, slices.Contains(agentfleet.ReservedSkillNames, strings.ToLower(p.name)), "primitive %s", p.name)
		require.Error(t, agentfleet.CheckSkillName(strings.ToLower(p.name)))
	}
}
