package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Bounds of what Compile keeps of a run.
const (
	compileScriptMax      = 4 << 10
	compileObservationMax = 1 << 10
	compileAnswerMax      = 2 << 10
	compileDescriptionMax = 200
	compileNameWords      = 5
)

// Compiled is a skill as compiled from a completed run: the description
// from its task, the recipe (Body) from its turns' scripts and what each
// observed, in turn order.
type Compiled struct {
	Name, Description, Body string
}

// Compile makes a skill of a completed run and its steps. The name is
// the task's first words (a valid, unreserved skill name). A body past
// agentfleet.SkillBodyMaxBytes drops middle turns, keeping the first and
// the last.
func Compile(run agentfleet.Run, steps []agentfleet.Step) Compiled {
	c := Compiled{Name: NameFor(run), Description: describe(run.Message)}
	type turn struct {
		n           int
		script, obs string
		failed      bool
	}
	var turns []turn
	for _, s := range steps {
		if len(turns) == 0 || turns[len(turns)-1].n != s.Turn {
			turns = append(turns, turn{n: s.Turn})
		}
		t := &turns[len(turns)-1]
		switch s.Kind {
		case agentfleet.StepModel:
			if sc, ok := loop.ExtractScript(s.Content); ok {
				t.script = sc.Code
			}
		case agentfleet.StepObservation:
			t.obs = s.Content
			t.failed = strings.HasPrefix(s.Content, fmt.Sprintf("Turn %d failed", s.Turn))
		}
	}
	var parts []string
	for _, t := range turns {
		if t.script == "" || t.failed {
			continue // a failed attempt is no part of the recipe
		}
		var b strings.Builder
		fmt.Fprintf(&b, "### Step %d\n\n```javascript\n%s\n```\n", len(parts)+1, clipText(strings.TrimSpace(t.script), compileScriptMax))
		if obs := strings.TrimSpace(t.obs); obs != "" {
			fmt.Fprintf(&b, "\nObserved:\n\n```\n%s\n```\n", clipText(obs, compileObservationMax))
		}
		parts = append(parts, b.String())
	}
	head := fmt.Sprintf("# %s\n\nCompiled from run %s (agent %s), which completed in %d turn(s). The task was:\n\n> %s\n\n## Recipe\n\n",
		c.Description, run.ID, run.Agent, run.Turn, strings.ReplaceAll(clipText(strings.TrimSpace(run.Message), compileAnswerMax), "\n", "\n> "))
	tail := ""
	if len(run.Answer) > 0 && string(run.Answer) != "null" {
		tail = "\n## Answer it gave\n\n" + clipText(answerText(run.Answer), compileAnswerMax) + "\n"
	}
	for len(parts) > 2 && len(head)+len(tail)+size(parts) > agentfleet.SkillBodyMaxBytes {
		parts = append(parts[:len(parts)/2], parts[len(parts)/2+1:]...)
	}
	c.Body = head + strings.Join(parts, "\n") + tail
	if len(c.Body) > agentfleet.SkillBodyMaxBytes {
		c.Body = clipText(c.Body, agentfleet.SkillBodyMaxBytes-8)
	}
	return c
}

func size(ps []string) int {
	n := 0
	for _, p := range ps {
		n += len(p) + 1
	}
	return n
}

func answerText(a json.RawMessage) string {
	var s string
	if json.Unmarshal(a, &s) == nil {
		return s
	}
	return string(a)
}

// describe is a description from a task: its first line, clipped.
func describe(task string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(task), "\n")
	return clipText(strings.TrimSpace(line), compileDescriptionMax)
}

// NameFor is a skill name from a run's task: its first words, joined by
// '-' (of its first line); "run-<id>" when it has no usable word.
func NameFor(run agentfleet.Run) string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(describe(run.Message)), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		if stopWords[w] || len(w) < 2 {
			continue
		}
		words = append(words, w)
		if len(words) == compileNameWords {
			break
		}
	}
	name := strings.Join(words, "-")
	if len(name) > 48 {
		name = strings.TrimRight(name[:48], "-")
	}
	if agentfleet.CheckSkillName(name) != nil {
		name = "run-" + strings.ToLower(shortID(run.ID))
	}
	if agentfleet.CheckSkillName(name) != nil {
		name = "run-skill"
	}
	return name
}

func shortID(id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 12 {
		s = s[len(s)-12:]
	}
	return s
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Writer is where a compiled skill is written (a store.Store).
type Writer interface {
	SkillPut(ctx context.Context, p store.SkillPutParams) (agentfleet.Skill, error)
}

// Learn writes run's compiled skill for a learning agent: over the
// near-duplicate x holds for the run's agent, if any (keeping its name
// and agents), else as a new skill for that agent, named from the task
// (and the run, when the name is another skill's). x may be nil (no
// skills yet). updated says it replaced a near-duplicate.
func Learn(ctx context.Context, w Writer, x *Index, run agentfleet.Run, steps []agentfleet.Step) (sk agentfleet.Skill, updated bool, err error) {
	c := Compile(run, steps)
	p := store.SkillPutParams{Tenant: run.Tenant, Name: c.Name, Description: c.Description, Body: c.Body,
		Agents: []string{run.Agent}, Source: agentfleet.SkillSourceCompiled, SourceRun: run.ID}
	if x != nil {
		if dup, _, ok := x.NearDuplicate(c.Description, run.Agent); ok {
			p.Name, p.Agents, updated = dup.Name, dup.Agents, true
		} else if _, taken := x.Get(p.Name); taken {
			p.Name = strings.TrimRight(clipName(p.Name, agentfleet.SkillNameMaxLen-13), "-") + "-" + shortID(run.ID)
		}
	}
	sk, err = w.SkillPut(ctx, p)
	return sk, updated, err
}

func clipName(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
