package fleet_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// skillsModel answers the skills tests' tasks and keeps each task's
// system prompts.
type skillsModel struct {
	mu      sync.Mutex
	systems map[string][]string
}

func newSkillsModel() *skillsModel { return &skillsModel{systems: map[string][]string{}} }

var catalogLine = regexp.MustCompile(`(?m)^// - ([a-z0-9_-]+)(: .*)?$`)

func (m *skillsModel) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
	task := r.FirstUser()
	system := r.Messages[0].Content
	m.mu.Lock()
	m.systems[task] = append(m.systems[task], system)
	m.mu.Unlock()
	turn := assistantTurns(r)
	var script string
	switch {
	case strings.HasPrefix(task, "use a skill:"):
		// The first skill the catalog lists, read through skillGet.
		first := catalogLine.FindStringSubmatch(system)
		if first == nil {
			script = `function run() { answer("no catalog") }`
		} else {
			script = fmt.Sprintf(`function run() { const l = skillList(%q); answer({name: %q, body: skillGet(%q), listed: l.map(s => s.name)}) }`,
				strings.TrimPrefix(task, "use a skill:"), first[1], first[1])
		}
	case strings.HasPrefix(task, "never answer"):
		script = `function run() { return {going: true} }`
	case turn == 0:
		script = `function run() { const rows = [["north", 10], ["south", 32]]; log("parsed", rows.length, "rows"); return {rows}; }`
	default:
		script = `function run(args) { answer("revenue: " + args.rows.map(r => r[0] + "=" + r[1]).join(", ")) }`
	}
	return "Here.\n```javascript\n" + script + "\n```", usage, nil
}

func (m *skillsModel) system(task string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.systems[task]...)
}

func catalogNames(system string) []string {
	var out []string
	for _, m := range catalogLine.FindAllStringSubmatch(system, -1) {
		out = append(out, m[1])
	}
	return out
}

const csvSkillBody = "# Column totals\n\n1. fetch the CSV\n2. BODY-MARKER-31: skip the header, split on commas, sum the column\n"

// Skills through the API, on both stores and two worker processes: an
// imported skill reaches the prompt of a run whose task it fits as one
// line and its body only through skillGet; bad input gets a clear 422; a
// completed run compiles into a skill that a paraphrased task finds
// first (a run not completed is a 409); a learn: true agent's second
// similar run updates the skill its first made instead of adding one.
func TestFleetSkills(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			m := newSkillsModel()
			o := fleetOptions{responder: m.respond}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			fleetSkills(t, m, setupFleetWith(t, o))
		})
	}
}

func fleetSkills(t *testing.T, m *skillsModel, f *testFleet) {
	ctx := f.ctx
	// Before any skill: no catalog, no skill primitives.
	plainTask := "never answer, plain"
	f.wait(f.submit(wire.RunCreateRequest{Message: plainTask, MaxTurns: 1}).ID, 30*time.Second)
	require.NotContains(t, m.system(plainTask)[0], "skill")

	sk, err := f.tenant.PutSkill(ctx, "", "csv-totals", wire.SkillRequest{Description: "Sum a column of a CSV file fetched from a URL", Body: csvSkillBody})
	require.NoError(t, err)
	require.Equal(t, agentfleet.SkillSourceImported, sk.Source)
	require.Equal(t, []string{}, sk.Agents)
	_, err = f.tenant.PutSkill(ctx, "", "pdf-text", wire.SkillRequest{Description: "Pull the text out of a PDF document", Body: "# PDF"})
	require.NoError(t, err)
	list, err := f.tenant.ListSkills(ctx, client.ListSkillsParams{})
	require.NoError(t, err)
	require.Len(t, list.Skills, 2)
	require.Equal(t, "csv-totals", list.Skills[0].Name)
	require.Empty(t, list.Skills[0].Body, "a listing holds no bodies")
	got, err := f.tenant.GetSkill(ctx, "", "csv-totals")
	require.NoError(t, err)
	require.Equal(t, csvSkillBody, got.Body)

	var ae *client.Error
	_, err = f.tenant.PutSkill(ctx, "", "huge", wire.SkillRequest{Body: strings.Repeat("x", agentfleet.SkillBodyMaxBytes+1)})
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 422, ae.Status)
	require.Contains(t, ae.Message, "body is 65537 bytes; a skill's body is at most 65536")
	_, err = f.tenant.PutSkill(ctx, "", "fetch", wire.SkillRequest{Body: "x"})
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 422, ae.Status)
	require.Contains(t, ae.Message, `would shadow the script global "fetch"`)

	// The imported skill, in a run.
	useTask := "use a skill: add up the amounts column in the CSV at example.org/x.csv"
	run := f.wait(f.submit(wire.RunCreateRequest{Message: useTask}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.JSONEq(t, fmt.Sprintf(`{"name":"csv-totals","body":%q,"listed":["csv-totals"]}`, csvSkillBody), string(run.Answer))
	system := m.system(useTask)[0]
	require.Equal(t, []string{"csv-totals"}, catalogNames(system), "one line, for the skill the task fits")
	require.Contains(t, system, "// - csv-totals: Sum a column of a CSV file fetched from a URL\n")
	require.NotContains(t, system, "BODY-MARKER-31", "never a body in the prompt")

	// A completed run compiles into a skill; a paraphrase finds it.
	first := "Convert the Fahrenheit temperature readings in the weather log to Celsius and chart them"
	done := f.wait(f.submit(wire.RunCreateRequest{Message: first}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	compiled, err := f.tenant.CompileRunSkill(ctx, done.ID, wire.SkillCompileRequest{Name: "temps"})
	require.NoError(t, err)
	require.Equal(t, agentfleet.SkillSourceCompiled, compiled.Source)
	require.Equal(t, done.ID, compiled.SourceRun)
	require.Equal(t, first, compiled.Description)
	require.Contains(t, compiled.Body, `log("parsed", rows.length, "rows")`, "the recipe holds the turns' scripts")
	require.Contains(t, compiled.Body, "parsed 2 rows", "and what they observed")
	stopped := f.wait(f.submit(wire.RunCreateRequest{Message: "never answer", MaxTurns: 1}).ID, 30*time.Second)
	require.NotEqual(t, agentfleet.StatusCompleted, stopped.Status)
	_, err = f.tenant.CompileRunSkill(ctx, stopped.ID, wire.SkillCompileRequest{})
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 409, ae.Status)
	require.Contains(t, ae.Message, "only a completed run compiles into a skill")

	paraphrase := "use a skill: turn degrees F from a weather record into centigrade and plot a graph of the readings"
	run = f.wait(f.submit(wire.RunCreateRequest{Message: paraphrase}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.Equal(t, "temps", catalogNames(m.system(paraphrase)[0])[0], "the compiled skill, found first for a paraphrase")

	// A learning agent: its second similar run updates, not duplicates.
	f.putAgent("learner", map[string]any{"learn": true})
	l1 := f.wait(f.submit(wire.RunCreateRequest{Agent: "learner", Message: "Summarise the quarterly sales CSV at example.org/q1.csv and report revenue per region"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, l1.Status, l1.Error)
	learned := func() []agentfleet.Skill {
		list, err := f.tenant.ListSkills(ctx, client.ListSkillsParams{})
		require.NoError(t, err)
		var out []agentfleet.Skill
		for _, s := range list.Skills {
			if s.Source == agentfleet.SkillSourceCompiled && len(s.Agents) == 1 && s.Agents[0] == "learner" {
				out = append(out, s)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(learned()) == 1 }, 10*time.Second, 20*time.Millisecond, "the first run makes a skill")
	require.Equal(t, l1.ID, learned()[0].SourceRun)
	l2 := f.wait(f.submit(wire.RunCreateRequest{Agent: "learner", Message: "Summarize the quarterly sales CSV from example.org/q2.csv and report the revenue by region"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, l2.Status, l2.Error)
	require.Eventually(t, func() bool { s := learned(); return len(s) == 1 && s[0].SourceRun == l2.ID }, 10*time.Second, 20*time.Millisecond,
		"the second run updates the skill: %+v", learned())
	other := f.wait(f.submit(wire.RunCreateRequest{Agent: "learner", Message: "Translate the release notes into German"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, other.Status, other.Error)
	require.Eventually(t, func() bool { return len(learned()) == 2 }, 10*time.Second, 20*time.Millisecond, "a different task adds one")

	// Deleted, a skill leaves the next prompt (another process wrote it:
	// the workers' indexes follow the store's revision).
	require.NoError(t, f.tenant.DeleteSkill(ctx, "", "csv-totals"))
	again := useTask + " again"
	f.wait(f.submit(wire.RunCreateRequest{Message: again}).ID, 30*time.Second)
	require.NotContains(t, catalogNames(m.system(again)[0]), "csv-totals")
}
