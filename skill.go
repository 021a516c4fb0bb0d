package agentfleet

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Skill is a tenant's named recipe (DESIGN.md section 20): a markdown
// Body its agents' scripts read with skillGet(name), found by relevance
// to a run's task (the prompt lists the best few by Name and
// Description, never a body). Agents names the agents that see it
// (empty: all). Source says how it came: imported (PUT /v1/skills) or
// compiled from a completed run (SourceRun).
type Skill struct {
	Tenant      string    `json:"tenant"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Body        string    `json:"body,omitempty"`
	Agents      []string  `json:"agents"`
	Source      string    `json:"source"`
	SourceRun   string    `json:"source_run,omitempty"`
	CreatedAt   time.Time `json:"created"`
	UpdatedAt   time.Time `json:"updated"`
}

// Sources of a skill.
const (
	SkillSourceImported = "imported"
	SkillSourceCompiled = "compiled"
)

// Bounds of a skill.
const (
	SkillBodyMaxBytes        = 64 << 10
	SkillDescriptionMaxBytes = 1024
	SkillNameMaxLen          = 64
	SkillAgentsMax           = 64
)

// SkillFor says whether agent sees s: its Agents is empty (all) or names
// agent.
func (s *Skill) SkillFor(agent string) bool {
	if len(s.Agents) == 0 {
		return true
	}
	for _, a := range s.Agents {
		if a == agent {
			return true
		}
	}
	return false
}

var skillNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ReservedSkillNames are names no skill may take: a script's primitives
// and globals (internal/sandbox's, which its tests hold to this list) and
// the JavaScript names a script leans on, compared without case, so
// that a catalog line never reads as a call of something else.
var ReservedSkillNames = []string{
	// The sandbox's primitives and modules.
	"log", "console", "answer", "assert", "help", "parseurl", "fetch", "http", "markdown",
	"htmltomarkdown", "ai", "aijson", "spawn", "wait", "require", "secret", "api", "mcp",
	"skilllist", "skillget",
	// The turn protocol and the language's own globals.
	"run", "args", "json", "math", "object", "array", "string", "number", "boolean", "date",
	"error", "promise", "symbol", "regexp", "map", "set", "globalthis", "undefined", "null",
	"true", "false", "nan", "infinity", "eval", "function",
}

// CheckSkillName says what is wrong with name as a skill's name: 1 to
// 64 of a-z, 0-9, '-' and '_' (a letter or digit first), not one of
// ReservedSkillNames.
func CheckSkillName(name string) error {
	if !skillNamePattern.MatchString(name) {
		return fmt.Errorf("skill name %q: use 1 to %d lower-case letters, digits, '-' or '_', starting with a letter or digit", name, SkillNameMaxLen)
	}
	folded := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
	for _, r := range ReservedSkillNames {
		if folded == r {
			return fmt.Errorf("skill name %q would shadow the script global %q: choose another name (e.g. %q)", name, r, name+"-skill")
		}
	}
	return nil
}

// SkillMatch is one skill as skillList() returns it: Score is its BM25
// relevance to the query (0 when listed without one).
type SkillMatch struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Score       float64 `json:"score"`
}

// SkillLibrary is the skills one run's agent sees, as its scripts reach
// them: SkillList ranks them by relevance to query (every skill, by
// name, when query is empty), at most limit; SkillGet reads one's body
// (an unknown name is an error that says so).
type SkillLibrary interface {
	SkillList(ctx context.Context, query string, limit int) ([]SkillMatch, error)
	SkillGet(ctx context.Context, name string) (string, error)
}
