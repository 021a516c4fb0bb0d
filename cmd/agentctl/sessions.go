package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// cmdSessions is `agentctl sessions ls|show|rm`: a session is the runs
// of one session id.
func (e cliEnv) cmdSessions(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("sessions needs a subcommand: ls, show or rm")
	}
	c := e.client()
	tenantFlag := func(fs *flag.FlagSet) *string {
		return fs.String("tenant", "", "the tenant whose sessions these are (with the admin token; a tenant's key sees its own)")
	}
	one := func(name string, fs *flag.FlagSet) (string, error) {
		pos, err := parse(fs, args[1:])
		if err != nil {
			return "", err
		}
		if len(pos) != 1 {
			return "", usagef("sessions %s takes one SESSION id", name)
		}
		return pos[0], nil
	}
	switch args[0] {
	case "ls", "list":
		fs := flag.NewFlagSet("sessions ls", flag.ContinueOnError)
		tenant := tenantFlag(fs)
		agent := fs.String("agent", "", "only sessions whose latest run is this agent's")
		limit := fs.Int("limit", 20, "page size")
		cursor := fs.String("cursor", "", "page cursor from a previous listing")
		asJSON := fs.Bool("json", false, "JSON output")
		if pos, err := parse(fs, args[1:]); err != nil {
			return err
		} else if len(pos) > 0 {
			return usagef("sessions ls takes no arguments")
		}
		list, err := c.ListSessions(ctx, client.ListSessionsParams{Tenant: *tenant, Agent: *agent, Limit: *limit, Cursor: *cursor})
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
	case "show":
		fs := flag.NewFlagSet("sessions show", flag.ContinueOnError)
		tenant := tenantFlag(fs)
		asJSON := fs.Bool("json", false, "JSON output")
		id, err := one("show", fs)
		if err != nil {
			return err
		}
		v, err := c.GetSession(ctx, *tenant, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, v)
		}
		printSession(e.stdout, v)
		return nil
	case "rm", "delete":
		fs := flag.NewFlagSet("sessions rm", flag.ContinueOnError)
		tenant := tenantFlag(fs)
		id, err := one("rm", fs)
		if err != nil {
			return err
		}
		d, err := c.DeleteSession(ctx, *tenant, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "session %s deleted (%d runs)\n", d.ID, d.Deleted)
		return nil
	}
	return usagef("unknown sessions subcommand %q (ls, show, rm)", args[0])
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
