package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// cmdApprovals is `agentctl approvals ls|show|approve|deny`: the calls
// that wait for a person's yes, and the yes or no.
func (e cliEnv) cmdApprovals(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("approvals needs a subcommand: ls, show, approve or deny")
	}
	c := e.client()
	switch args[0] {
	case "ls", "list":
		fs := flag.NewFlagSet("approvals ls", flag.ContinueOnError)
		status := fs.String("status", "pending", "pending, approved, denied, or all")
		runID := fs.String("run", "", "only this run's")
		tenant := fs.String("tenant", "", "only this tenant's (the admin token; default: every tenant's)")
		limit := fs.Int("limit", 50, "page size")
		cursor := fs.String("cursor", "", "page cursor from a previous listing")
		asJSON := fs.Bool("json", false, "JSON output")
		if pos, err := parse(fs, args[1:]); err != nil {
			return err
		} else if len(pos) > 0 {
			return usagef("approvals ls takes no arguments (got %q)", pos[0])
		}
		p := client.ListApprovalsParams{Status: *status, RunID: *runID, Tenant: *tenant, Limit: *limit, Cursor: *cursor}
		switch *status {
		case "all":
			p.Status = ""
		case "pending", "approved", "denied":
		default:
			return usagef("approvals ls --status %q: use pending, approved, denied or all", *status)
		}
		list, err := c.ListApprovals(ctx, p)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, list)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tRUN\tTURN\tCALL\tSTATUS\tPREVIEW")
		for _, a := range list.Approvals {
			st := a.Status
			switch {
			case a.Status == "pending":
				st = "pending until " + a.ExpiresAt.Local().Format(time.DateTime)
			case a.Reason != "":
				st += " (" + firstLine(a.Reason) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.ID, a.Tenant, a.RunID, a.Turn, describeApproval(a), st, clip(firstLine(a.Preview), 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if list.NextCursor != "" {
			fmt.Fprintf(e.stderr, "more: agentctl approvals ls --cursor %s\n", list.NextCursor)
		}
		return nil
	case "show":
		pos, err := parse(flag.NewFlagSet("approvals show", flag.ContinueOnError), args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("approvals show takes one approval ID")
		}
		a, err := c.GetApproval(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, a)
	case "approve", "deny":
		approve := args[0] == "approve"
		fs := flag.NewFlagSet("approvals "+args[0], flag.ContinueOnError)
		reason := fs.String("reason", "", "why (recorded; a denial's reason is what the script's error says)")
		var scope *string
		if approve {
			scope = fs.String("scope", "", `"session": the same call (primitive, method, URL) goes through for the rest of the run's session`)
		}
		asJSON := fs.Bool("json", false, "print the approval as JSON")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("approvals %s takes one approval ID", args[0])
		}
		d := wire.ApprovalDecision{Reason: *reason}
		decide := c.Deny
		if approve {
			d.Scope, decide = *scope, c.Approve
		}
		a, err := decide(ctx, pos[0], d)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, a)
		}
		what := a.Status
		if a.Scope == "session" {
			what += " for the rest of session " + a.SessionID
		}
		fmt.Fprintf(e.stdout, "approval %s %s (%s); run %s goes on\n", a.ID, what, describeApproval(a), a.RunID)
		return nil
	}
	return usagef("unknown approvals subcommand %q: use ls, show, approve or deny", args[0])
}

// describeApproval names the call an approval is for.
func describeApproval(a wire.ApprovalView) string {
	if a.URL == "" {
		return a.Primitive
	}
	return strings.TrimSpace(a.Primitive + " " + a.Method + " " + a.URL)
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
