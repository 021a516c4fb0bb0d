package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
)

func (e cliEnv) agentsCmd() *cobra.Command {
	return group("agents", "Define, list, show and delete agents",
		e.agentsApplyCmd(),
		aliases(leaf("ls [flags]", "List agents with their current versions",
			"agentctl agents ls\nagentctl agents ls --json | jq -r '.agents[].name'",
			func(fs *pflag.FlagSet) runFunc {
				limit := fs.Int("limit", 50, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					list, err := e.client().ListAgents(ctx, *limit, *cursor)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tVERSION\tMODEL\tPRIMITIVES\tAPPROVE\tUPDATED")
					for _, a := range list.Agents {
						prims := "*"
						if a.Primitives != nil {
							prims = strings.Join(a.Primitives, ",")
						}
						fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", a.Name, a.Version, orDash(a.Model), orDash(prims),
							orDash(strings.Join(a.Approve, ",")), a.UpdatedAt.Local().Format(time.DateTime))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl agents ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		leaf("show [flags] NAME", "Show an agent as JSON (what apply -f takes back); its prompt profile on stderr",
			"agentctl agents show triage\nagentctl agents show --version 2 triage > triage.json",
			func(fs *pflag.FlagSet) runFunc {
				version := fs.Int("version", 0, "a past version (what a run's agent_version names); 0: the current one")
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("agents show takes one agent NAME")
					}
					a, err := e.client().GetAgent(ctx, pos[0], *version)
					if err != nil {
						return err
					}
					// The profile goes to stderr: stdout stays what apply -f takes back.
					fmt.Fprintln(e.stderr, profileLine(a.AgentSpec))
					return writeJSON(e.stdout, a)
				}
			}),
		aliases(leaf("rm NAME", "Delete an agent (runs admitted under it finish with it)",
			"agentctl agents rm triage",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("agents rm takes one agent NAME")
					}
					if err := e.client().DeleteAgent(ctx, pos[0]); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "agent %s deleted (runs admitted under it finish with it)\n", pos[0])
					return nil
				}
			}), "delete"),
	)
}

// profileLine says how the agent's prompts spend its context window.
func profileLine(spec agentfleet.AgentSpec) string {
	p := agentfleet.ProfileFor(spec.ContextWindow)
	window := "context_window unset, the defaults"
	if p.Window > 0 {
		window = fmt.Sprintf("context_window %d", p.Window)
	}
	summarizer := cmp.Or(spec.SummaryModel, spec.Model, "the worker's model")
	return fmt.Sprintf("profile (%s): prompt budget %d tokens; history over %d folds into a summary (up to %d tokens, by %s) keeping %d verbatim; logs %d bytes a turn; reply reserve %d",
		window, p.Budget, p.Trigger, p.SummaryTokens, summarizer, p.Keep, p.LogCap, p.Reserve)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// agentsApplyCmd defines or replaces an agent from a YAML or JSON file
// (-f -: standard input). The agent's name is the file's name field or
// the NAME argument; given both, they must match.
func (e cliEnv) agentsApplyCmd() *cobra.Command {
	return leaf("apply -f FILE [flags] [NAME]", "Define or replace an agent from a YAML or JSON file (a new version if it changed)",
		"agentctl agents apply -f triage.yaml\nagentctl agents show triage | agentctl agents apply -f - triage",
		func(fs *pflag.FlagSet) runFunc {
			file := fs.StringP("file", "f", "", "the agent file, YAML or JSON (- reads standard input)")
			return func(ctx context.Context, pos []string) error {
				if *file == "" || len(pos) > 1 {
					return usagef("agents apply takes -f FILE (YAML or JSON) and, when the file names none, the agent's NAME")
				}
				return e.agentsApply(ctx, e.client(), *file, pos)
			}
		})
}

func (e cliEnv) agentsApply(ctx context.Context, c *client.Client, file string, pos []string) error {
	var err error
	var raw []byte
	if file == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return usagef("agents apply: %v", err)
	}
	body, name, err := agentFile(raw)
	if err != nil {
		return usagef("agents apply: %s: %v", file, err)
	}
	switch {
	case len(pos) == 1 && name != "" && pos[0] != name:
		return usagef("agents apply: the file names agent %q, not %q: they must match", name, pos[0])
	case len(pos) == 1:
		name = pos[0]
	case name == "":
		return usagef("agents apply: %s has no name: add name: to it, or give the NAME argument", file)
	}
	before, err := c.GetAgent(ctx, name, 0)
	if err != nil && !client.IsNotFound(err) {
		return err
	}
	a, err := c.PutAgentJSON(ctx, name, body)
	if err != nil {
		return err
	}
	switch {
	case before.Version == 0:
		fmt.Fprintf(e.stderr, "agent %s created (version %d)\n", a.Name, a.Version)
	case before.Version == a.Version:
		fmt.Fprintf(e.stderr, "agent %s unchanged (version %d)\n", a.Name, a.Version)
	default:
		fmt.Fprintf(e.stderr, "agent %s is now version %d (was %d); runs admitted before keep theirs\n", a.Name, a.Version, before.Version)
	}
	return writeJSON(e.stdout, a)
}

// agentFile reads an agent file as JSON for PUT /v1/agents/{name}, and
// the name it gives. YAML is turned into the same JSON, so the server
// names a field it does not know, whichever the file is.
func agentFile(raw []byte) (json.RawMessage, string, error) {
	var doc any
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &doc); err != nil {
			return nil, "", fmt.Errorf("not valid JSON: %v", err)
		}
	} else if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, "", fmt.Errorf("not valid YAML: %v", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("an agent file is one mapping of fields (system, model, primitives, ...)")
	}
	name := ""
	if n, ok := m["name"]; ok {
		if name, ok = n.(string); !ok || name == "" {
			return nil, "", fmt.Errorf("name must be a non-empty string")
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, "", fmt.Errorf("a value has no JSON form: %v", err)
	}
	return body, name, nil
}
