package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// skillsCmd is `agentctl skills import|ls|show|rm`: a tenant's skills,
// recipes its runs find by relevance and read with skillGet().
func (e cliEnv) skillsCmd() *cobra.Command {
	tenantFlag := func(fs *pflag.FlagSet) *string {
		return fs.String("tenant", "", skillTenantHelp)
	}
	return group("skills", "Recipes a tenant's runs find by relevance and read with skillGet()",
		leaf("import [flags] DIR", "Import DIR/<name>/SKILL.md files (YAML front matter: name, description) as skills",
			"agentctl skills import ./skills\nagentctl skills import --agent triage --tenant acme ./skills",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				agents := fs.StringSlice("agent", nil, "the agents that see the skills (repeat or comma-separate; default: all)")
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("skills import takes one DIR holding <name>/SKILL.md files")
					}
					files, err := readSkillDir(pos[0])
					if err != nil {
						return err
					}
					c := e.client()
					for _, f := range files {
						req := wire.SkillRequest{Description: f.Description, Body: f.Body, Agents: *agents}
						if len(req.Agents) == 0 {
							req.Agents = f.Agents
						}
						if _, err := c.PutSkill(ctx, *tenant, f.Name, req); err != nil {
							return fmt.Errorf("%s: %w", f.Path, err)
						}
						fmt.Fprintf(e.stdout, "skill %s imported from %s\n", f.Name, f.Path)
					}
					return nil
				}
			}),
		aliases(leaf("ls [flags]", "List skills (names and descriptions, not bodies)",
			"agentctl skills ls\nagentctl skills ls --tenant acme --json",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				limit := fs.Int("limit", 100, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					list, err := e.client().ListSkills(ctx, client.ListSkillsParams{Tenant: *tenant, Limit: *limit, Cursor: *cursor})
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tSOURCE\tAGENTS\tUPDATED\tDESCRIPTION")
					for _, s := range list.Skills {
						agents := "*"
						if len(s.Agents) > 0 {
							agents = strings.Join(s.Agents, ",")
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Source, agents, s.UpdatedAt.Local().Format(time.DateTime), s.Description)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl skills ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		e.showCmd(e.skillNoun(), "Show a skill with its body as JSON", "agentctl skills show csv-summary"),
		e.rmCmd(e.skillNoun(), "agentctl skills rm csv-summary"),
	)
}

const skillTenantHelp = "the tenant whose skills these are (with the admin token)"

// skillNoun is a skill to show and rm.
func (e cliEnv) skillNoun() tenantNoun {
	return tenantNoun{noun: "skill", tenantHelp: skillTenantHelp,
		get: func(ctx context.Context, tenant, name string) (any, error) {
			return e.client().GetSkill(ctx, tenant, name)
		},
		del: func(ctx context.Context, tenant, name string) error { return e.client().DeleteSkill(ctx, tenant, name) }}
}

// skillFile is one SKILL.md read for import.
type skillFile struct {
	Path              string
	Name, Description string
	Agents            []string
	Body              string
}

// readSkillDir reads dir/<name>/SKILL.md, in name order. Every file is
// checked before any is imported: an import with a bad file imports
// nothing, and the error names each bad file (and its line, where YAML
// says one).
func readSkillDir(dir string) ([]skillFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, usagef("skills import: %v", err)
	}
	var files []skillFile
	var problems []string
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		p := filepath.Join(dir, ent.Name(), "SKILL.md")
		raw, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		f, err := parseSkillFile(p, ent.Name(), raw)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		files = append(files, f)
	}
	if len(problems) > 0 {
		return nil, exitError{exitUsage, fmt.Errorf("skills import: nothing imported:\n  %s", strings.Join(problems, "\n  "))}
	}
	if len(files) == 0 {
		return nil, usagef("skills import: %s holds no <name>/SKILL.md", dir)
	}
	slices.SortFunc(files, func(a, b skillFile) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// parseSkillFile reads a SKILL.md: "---", YAML front matter (name,
// description, optionally agents), "---", then the markdown body. The
// name defaults to the directory's.
func parseSkillFile(path, dirName string, raw []byte) (skillFile, error) {
	f := skillFile{Path: path, Name: dirName}
	if len(raw) > agentfleet.SkillBodyMaxBytes {
		return f, fmt.Errorf("%s: %d bytes, over the %d KiB a skill may have", path, len(raw), agentfleet.SkillBodyMaxBytes>>10)
	}
	text := bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(text, []byte("---\n"))
	if !ok {
		return f, fmt.Errorf("%s: line 1: no front matter: a SKILL.md starts with a '---' line, then name: and description:, then '---'", path)
	}
	front, body, ok := bytes.Cut(rest, []byte("\n---\n"))
	if !ok {
		if front, ok = bytes.CutSuffix(rest, []byte("\n---")); !ok {
			return f, fmt.Errorf("%s: the front matter that starts on line 1 has no closing '---' line", path)
		}
	}
	var meta struct {
		Name        string   `yaml:"name"`
		Description string   `yaml:"description"`
		Agents      []string `yaml:"agents"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(front))
	dec.KnownFields(true)
	// An empty front matter (io.EOF) fails below, on its missing
	// description, with a clearer message.
	if err := dec.Decode(&meta); err != nil && !errors.Is(err, io.EOF) {
		return f, fmt.Errorf("%s: front matter: %s", path, frontMatterProblem(err))
	}
	if meta.Name != "" {
		f.Name = meta.Name
	}
	if err := agentfleet.CheckSkillName(f.Name); err != nil {
		return f, fmt.Errorf("%s: %v", path, err)
	}
	if strings.TrimSpace(meta.Description) == "" {
		return f, fmt.Errorf("%s: the front matter has no description: (what the skill is for, one line: the prompt's catalog shows it)", path)
	}
	f.Description, f.Agents = strings.TrimSpace(meta.Description), meta.Agents
	f.Body = strings.TrimLeft(string(body), "\n")
	return f, nil
}

var (
	yamlLine     = regexp.MustCompile(`line (\d+)`)
	yamlUnknown  = regexp.MustCompile(`field (\S+) not found in type .*$`)
	frontMatterK = "name, description, agents"
)

// frontMatterProblem is a YAML error of a front matter in the file's
// terms: its lines counted from the file's first (the front matter starts
// on the second), an unknown field named with the ones there are.
func frontMatterProblem(err error) string {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for i, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		m = yamlUnknown.ReplaceAllString(m, "unknown field $1 (a front matter has "+frontMatterK+")")
		msgs[i] = yamlLine.ReplaceAllStringFunc(m, func(l string) string {
			n, _ := strconv.Atoi(strings.TrimPrefix(l, "line "))
			return "line " + strconv.Itoa(n+1)
		})
	}
	return strings.Join(msgs, "; ")
}
