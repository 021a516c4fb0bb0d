// The skills catalog: for a run whose agent sees skills, the system
// prompt's API block declares skillList() and skillGet() and lists the
// SkillCatalogSize skills most relevant to the task, a line each (name
// and description, never a body). A run without skills gets the prompt
// it always had, byte for byte.

package loop

import (
	"context"
	"strings"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/sandbox"
)

// SkillCatalogSize is how many skills the prompt lists.
const SkillCatalogSize = 5

// skillLineMaxChars bounds one catalog line's description.
const skillLineMaxChars = 200

// SkillCatalog is the catalog's lines for matches (the top of the
// task's ranking): the declarations, a header, then one line per skill.
func SkillCatalog(matches []agentfleet.SkillMatch) string {
	var b strings.Builder
	b.WriteString(sandbox.SkillListDecl)
	b.WriteByte('\n')
	b.WriteString(sandbox.SkillGetDecl)
	b.WriteByte('\n')
	if len(matches) == 0 {
		b.WriteString("// skills: none matches this task by its words; skillList(query) searches them all\n")
		return b.String()
	}
	b.WriteString("// skills most relevant to this task (skillGet(name) reads one's recipe before you start):\n")
	for _, m := range matches {
		desc := strings.Join(strings.Fields(m.Description), " ")
		b.WriteString("// - ")
		b.WriteString(m.Name)
		if desc != "" {
			b.WriteString(": ")
			b.WriteString(clip(desc, skillLineMaxChars))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// withSkills adds the run's skills catalog to system, before the limits
// line that closes its API block. Not cached with the prompt: it is the
// task's, and one search.
func (t *turn) withSkills(ctx context.Context, system string) string {
	if t.in.Skills == nil {
		return system
	}
	matches, err := t.in.Skills.SkillList(ctx, t.run.Message, SkillCatalogSize)
	if err != nil {
		return system // the scripts' skillList() says what is wrong
	}
	cat := SkillCatalog(matches) // redacted with the rest of the prompt
	if i := strings.LastIndex(system, "\n// Limits"); i >= 0 {
		return system[:i+1] + cat + system[i+1:]
	}
	if i := strings.LastIndex(system, "\n```"); i >= 0 {
		return system[:i+1] + cat + system[i+1:]
	}
	return system + "\n" + cat
}
