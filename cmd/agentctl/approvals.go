package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// approvalsCmd is `agentctl approvals ls|show|approve|deny`: the calls
// that wait for a person's yes, and the yes or no.
func (e cliEnv) approvalsCmd() *cobra.Command {
	return group("approvals", "Calls waiting for a person's yes: list, approve, deny",
		aliases(leaf("ls [flags]", "List approvals (pending ones by default)",
			"agentctl approvals ls\nagentctl approvals ls --status all --run run_01JD3X --json",
			func(fs *pflag.FlagSet) runFunc {
				status := fs.String("status", "pending", "pending, approved, denied, or all")
				runID := fs.String("run", "", "only this run's")
				tenant := fs.String("tenant", "", "only this tenant's (the admin token; default: every tenant's)")
				limit := fs.Int("limit", 50, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					p := client.ListApprovalsParams{Status: *status, RunID: *runID, Tenant: *tenant, Limit: *limit, Cursor: *cursor}
					switch *status {
					case "all":
						p.Status = ""
					case "pending", "approved", "denied":
					default:
						return usagef("approvals ls --status %q: use pending, approved, denied or all", *status)
					}
					list, err := e.client().ListApprovals(ctx, p)
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
				}
			}), "list"),
		leaf("show [flags] ID", "Show an approval as JSON: the call, its preview, its decision",
			"agentctl approvals show apr_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("approvals show takes one approval ID")
					}
					a, err := e.client().GetApproval(ctx, pos[0])
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, a)
				}
			}),
		e.approvalDecideCmd(true),
		e.approvalDecideCmd(false),
	)
}

// approvalDecideCmd is approvals approve or approvals deny.
func (e cliEnv) approvalDecideCmd(approve bool) *cobra.Command {
	name, short, example := "deny", "Deny a waiting call: the script's call fails with the reason",
		`agentctl approvals deny --reason "not on a Friday" apr_01JD3X`
	if approve {
		name, short, example = "approve", "Approve a waiting call: the run goes on",
			"agentctl approvals approve apr_01JD3X\nagentctl approvals approve --scope session --reason \"trusted host\" apr_01JD3X"
	}
	return leaf(name+" [flags] ID", short, example, func(fs *pflag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (recorded; a denial's reason is what the script's error says)")
		var scope *string
		if approve {
			scope = fs.String("scope", "", `"session": the same call (primitive, method, URL) goes through for the rest of the run's session`)
		}
		asJSON := fs.Bool("json", false, "print the approval as JSON")
		return func(ctx context.Context, pos []string) error {
			if len(pos) != 1 {
				return usagef("approvals %s takes one approval ID", name)
			}
			c := e.client()
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
	})
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
