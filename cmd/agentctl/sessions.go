package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// sessionsCmd is `agentctl sessions ls|show|rm`: a session is the runs
// of one session id.
func (e cliEnv) sessionsCmd() *cobra.Command {
	tenantFlag := func(fs *pflag.FlagSet) *string {
		return fs.String("tenant", "", "the tenant whose sessions these are (with the admin token; a tenant's key sees its own)")
	}
	one := func(name string, pos []string) (string, error) {
		if len(pos) != 1 {
			return "", usagef("sessions %s takes one SESSION id", name)
		}
		return pos[0], nil
	}
	return group("sessions", "List, show and delete sessions (the runs of one session id)",
		aliases(leaf("ls [flags]", "List sessions, the latest updated first",
			"agentctl sessions ls\nagentctl sessions ls --agent triage --json",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				agent := fs.String("agent", "", "only sessions whose latest run is this agent's")
				limit := fs.Int("limit", 20, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					list, err := e.client().ListSessions(ctx, client.ListSessionsParams{Tenant: *tenant, Agent: *agent, Limit: *limit, Cursor: *cursor})
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tAGENT\tRUNS\tLAST RUN\tSTATUS\tTOKENS\tUPDATED")
					for _, s := range list.Sessions {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", s.ID, s.Agent, s.Runs, s.LastRunID, s.LastStatus, s.Tokens,
							s.UpdatedAt.Local().Format(time.DateTime))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl sessions ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		leaf("show [flags] SESSION", "Show a session as a conversation: each run's message and answer",
			"agentctl sessions show s-42\nagentctl sessions show --json s-42",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, pos []string) error {
					id, err := one("show", pos)
					if err != nil {
						return err
					}
					v, err := e.client().GetSession(ctx, *tenant, id)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, v)
					}
					printSession(e.stdout, v)
					return nil
				}
			}),
		aliases(leaf("rm [flags] SESSION", "Delete a session's runs (none may be unfinished)",
			"agentctl sessions rm s-42",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				return func(ctx context.Context, pos []string) error {
					id, err := one("rm", pos)
					if err != nil {
						return err
					}
					d, err := e.client().DeleteSession(ctx, *tenant, id)
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "session %s deleted (%d runs)\n", d.ID, d.Deleted)
					return nil
				}
			}), "delete"),
	)
}

// printSession writes a session as a conversation: each run's message,
// then its answer or error.
func printSession(w io.Writer, v wire.SessionView) {
	s := v.Session
	fmt.Fprintf(w, "session %s  agent %s  %d runs  %d tokens  updated %s\n", s.ID, s.Agent, s.Runs, s.Tokens,
		s.UpdatedAt.Local().Format(time.DateTime))
	if len(v.Runs) < s.Runs {
		fmt.Fprintf(w, "(the latest %d of its %d runs)\n", len(v.Runs), s.Runs)
	}
	for _, r := range v.Runs {
		fmt.Fprintf(w, "\n── run %s  %s  %s\n", r.ID, r.Status, r.CreatedAt.Local().Format(time.DateTime))
		fmt.Fprint(w, indent(r.Message, "> "))
		switch {
		case r.Status == agentfleet.StatusCompleted:
			fmt.Fprint(w, indent(answerText(r.Answer), "  "))
		case r.Error != "":
			fmt.Fprint(w, indent(string(r.Status)+": "+r.Error, "  ! "))
		case !r.Status.Terminal():
			fmt.Fprintf(w, "  (%s)\n", r.Status)
		}
	}
	if cp := v.Checkpoint; cp != nil {
		fmt.Fprintf(w, "\ncheckpoint: run %s turn %d (%d characters)\n", cp.RunID, cp.Turn, len(cp.Content))
	}
}
