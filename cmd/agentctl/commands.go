package main

import (
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

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// cliEnv is where commands write.
type cliEnv struct {
	stdout, stderr io.Writer
}

func (e cliEnv) client() *client.Client {
	url := os.Getenv("AGENTFLEET_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	return client.New(url, os.Getenv("AGENTFLEET_TOKEN"))
}

func (e cliEnv) runCmd() *cobra.Command {
	return long(leaf("run [flags] MESSAGE", "Submit a run; with --wait, follow it to its end",
		`agentctl run "Summarise https://example.com"
agentctl run --wait --agent triage --session s-42 "Triage issue 42"
agentctl run "hi" --wait --json`,
		func(fs *pflag.FlagSet) runFunc {
			agent := fs.String("agent", "", "agent to run (default: the tenant's default agent)")
			session := fs.String("session", "", "session id: runs of a session run one at a time, in order")
			contextJSON := fs.String("context", "", "JSON value handed to the first turn as args")
			maxTurns := fs.Int("max-turns", 0, "turn cap (0: the agent's)")
			maxTokens := fs.Int64("max-tokens", 0, "token cap for the run (0: none)")
			timeout := fs.String("timeout", "", "run timeout, e.g. 10m")
			idem := fs.String("idempotency-key", "", "dedupes repeated submissions")
			callback := fs.String("callback-url", "", "receives the run's final view when it ends, signed with the tenant's callback secret")
			wait := fs.Bool("wait", false, "follow the run: events to stderr, the answer to stdout")
			asJSON := fs.Bool("json", false, "machine output: the run as JSON; with --wait, NDJSON events then the run")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("run takes one MESSAGE (quote it), got %d arguments", len(pos))
				}
				req := wire.RunCreateRequest{Agent: *agent, Message: pos[0], SessionID: *session, MaxTurns: *maxTurns,
					MaxTokens: *maxTokens, Timeout: *timeout, IdempotencyKey: *idem, CallbackURL: *callback}
				if *contextJSON != "" {
					if !json.Valid([]byte(*contextJSON)) {
						return usagef("--context %q is not valid JSON", *contextJSON)
					}
					req.Context = json.RawMessage(*contextJSON)
				}
				c := e.client()
				run, err := c.CreateRun(ctx, req)
				if err != nil {
					return err
				}
				if !*wait {
					if *asJSON {
						return writeJSON(e.stdout, run)
					}
					fmt.Fprintln(e.stdout, run.ID)
					return nil
				}
				if !*asJSON {
					fmt.Fprintf(e.stderr, "run %s queued\n", run.ID)
				}
				return e.follow(ctx, c, run.ID, *asJSON, true)
			}
		}), `Submits a run and prints its id. With --wait it follows the run: events to
stderr, the answer alone to stdout, and the exit code says how it ended
(0 completed, 1 failed, 2 max turns, 4 cancelled, 5 budget).`)
}

func (e cliEnv) watchCmd() *cobra.Command {
	return leaf("watch [flags] RUN", "Follow a run's events until it ends (exit code as run --wait)",
		"agentctl watch run_01JD3X\nagentctl watch --json run_01JD3X | jq .type",
		func(fs *pflag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "NDJSON events, then the run")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("watch takes one RUN id")
				}
				return e.follow(ctx, e.client(), pos[0], *asJSON, false)
			}
		})
}

// follow streams a run's events until it ends and maps its final status
// to the exit code. With answerOut, events go to stderr and the answer
// alone to stdout; otherwise events go to stdout.
func (e cliEnv) follow(ctx context.Context, c *client.Client, runID string, asJSON, answerOut bool) error {
	events := e.stdout
	if answerOut && !asJSON {
		events = e.stderr
	}
	parked := false
	live := &livePrinter{w: events}
	err := c.Events(ctx, runID, 0, func(ev agentfleet.Event) error {
		if asJSON {
			if err := writeJSONLine(e.stdout, ev); err != nil {
				return err
			}
		} else {
			live.print(ev)
		}
		if ev.Type == agentfleet.EventBudgetWaiting {
			parked = true
			return client.ErrStopEvents
		}
		return nil
	})
	if err != nil {
		return err
	}
	run, err := c.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e.stdout, run); err != nil {
			return err
		}
	} else if answerOut && run.Status == agentfleet.StatusCompleted {
		fmt.Fprintln(e.stdout, answerText(run.Answer))
	}
	switch {
	case parked || run.Status == agentfleet.StatusWaitingBudget:
		return exitError{exitBudget, fmt.Errorf("run %s is waiting for budget; it resumes by itself when budget returns (agentctl watch %s)", runID, runID)}
	case run.Status == agentfleet.StatusCompleted:
		return nil
	case run.Status == agentfleet.StatusMaxTurns:
		return exitError{exitMaxTurns, fmt.Errorf("run %s reached its max turns: %s", runID, run.Error)}
	case run.Status == agentfleet.StatusCancelled:
		return exitError{exitCancelled, fmt.Errorf("run %s was cancelled", runID)}
	case strings.Contains(run.Error, "budget"):
		return exitError{exitBudget, fmt.Errorf("run %s failed: %s", runID, run.Error)}
	default:
		return exitError{exitFailed, fmt.Errorf("run %s %s: %s", runID, run.Status, run.Error)}
	}
}

// livePrinter prints events for a human, and a turn's model reply as it
// streams (response_chunk events): then the turn's model_call and
// response events print without the text already shown.
type livePrinter struct {
	w        io.Writer
	streamed map[int]bool // turns whose reply was shown as it streamed
	open     bool         // a streamed reply is being written
}

func (p *livePrinter) print(ev agentfleet.Event) {
	const bar = "    │ "
	if ev.Type == agentfleet.EventResponseChunk {
		if p.streamed == nil {
			p.streamed = map[int]bool{}
		}
		switch {
		case !p.open:
			fmt.Fprintf(p.w, "     turn %-2d %-18s\n%s", ev.Turn, "model (streaming)", bar)
		case ev.Index == 1:
			// The stream broke and the reply came again whole.
			fmt.Fprintf(p.w, "\n    (stream broke; the whole reply:)\n%s", bar)
		}
		p.open, p.streamed[ev.Turn] = true, true
		fmt.Fprint(p.w, strings.ReplaceAll(ev.Text, "\n", "\n"+bar))
		return
	}
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
	if p.streamed[ev.Turn] && (ev.Type == agentfleet.EventModelCall || ev.Type == agentfleet.EventResponse) {
		ev.Content = ""
	}
	printEvent(p.w, ev)
}

// printEvent writes one event for a human; response chunks are the
// livePrinter's.
func printEvent(w io.Writer, ev agentfleet.Event) {
	head := fmt.Sprintf("#%-3d turn %-2d %-18s", ev.Seq, ev.Turn, ev.Type)
	switch ev.Type {
	case agentfleet.EventResponseChunk:
	case agentfleet.EventModelCall:
		tok := ""
		if ev.Tokens != nil {
			tok = fmt.Sprintf("%d+%d tokens", ev.Tokens.Prompt, ev.Tokens.Completion)
		}
		fmt.Fprintf(w, "%s %s %s\n", head, ev.Summary, tok)
		if ev.Content != "" {
			fmt.Fprint(w, indent(ev.Content, "    │ "))
		}
	case agentfleet.EventExecuteJS:
		fmt.Fprintln(w, head)
	case agentfleet.EventLog, agentfleet.EventResponse, agentfleet.EventError, agentfleet.EventUser:
		fmt.Fprintln(w, head)
		fmt.Fprint(w, indent(ev.Content, "    │ "))
	default:
		fmt.Fprintf(w, "%s %s\n", head, strings.TrimSpace(ev.Summary+" "+firstLine(ev.Content)))
	}
}

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// answerText prints a string answer as is and anything else as JSON.
func answerText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func (e cliEnv) runsCmd() *cobra.Command {
	return group("runs", "List, show, trace, cancel and delete runs",
		aliases(leaf("ls [flags]", "List runs, newest first",
			"agentctl runs ls --status running,queued\nagentctl runs ls --parent run_01JD3X --json",
			func(fs *pflag.FlagSet) runFunc {
				status := fs.String("status", "", "filter by status (comma-separated)")
				agent := fs.String("agent", "", "filter by agent")
				session := fs.String("session", "", "filter by session")
				parent := fs.String("parent", "", "list the children of this run")
				limit := fs.Int("limit", 20, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					p := client.ListRunsParams{Agent: *agent, SessionID: *session, ParentRunID: *parent, Limit: *limit, Cursor: *cursor}
					if *status != "" {
						for _, s := range strings.Split(*status, ",") {
							p.Status = append(p.Status, agentfleet.RunStatus(strings.TrimSpace(s)))
						}
					}
					list, err := e.client().ListRuns(ctx, p)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSTATUS\tAGENT\tTURNS\tTOKENS\tCREATED")
					for _, r := range list.Runs {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Status, r.Agent, r.Turn, r.Usage.Total(), r.CreatedAt.Local().Format(time.DateTime))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl runs ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		leaf("show [flags] RUN", "Show a run as JSON",
			"agentctl runs show run_01JD3X\nagentctl runs show run_01JD3X | jq -r .answer",
			func(fs *pflag.FlagSet) runFunc {
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("runs show takes one RUN id")
					}
					run, err := e.client().GetRun(ctx, pos[0])
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, run)
				}
			}),
		e.runsStepsCmd(),
		leaf("cancel RUN", "Cancel a run (a running one stops at its next turn boundary)",
			"agentctl runs cancel run_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("runs cancel takes one RUN id")
					}
					run, err := e.client().CancelRun(ctx, pos[0])
					if err != nil {
						return err
					}
					if run.Status == agentfleet.StatusCancelled {
						fmt.Fprintf(e.stdout, "run %s cancelled\n", run.ID)
					} else {
						fmt.Fprintf(e.stdout, "run %s will stop at its next turn boundary\n", run.ID)
					}
					return nil
				}
			}),
		leaf("rm RUN", "Delete an ended run with its trace",
			"agentctl runs rm run_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("runs rm takes one RUN id")
					}
					if err := e.client().DeleteRun(ctx, pos[0]); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "run %s deleted\n", pos[0])
					return nil
				}
			}),
	)
}

// tenantSettings declares the flags tenants create and set-budget share;
// the function returned is the request they make.
func tenantSettings(fs *pflag.FlagSet) func() wire.TenantRequest {
	tokens := fs.Int64("tokens", -1, "token limit per window (0: unlimited; -1: unchanged)")
	window := fs.String("window", "", `budget window: "day", "month" or a duration like "24h"`)
	tpm := fs.Int64("tokens-per-minute", -1, "tokens-per-minute limit (0: none; -1: unchanged)")
	maxConc := fs.Int("max-concurrent", -1, "max concurrent runs (0: no limit; -1: unchanged)")
	maxQueued := fs.Int("max-queued", -1, "max runs not finished, queued included (0: the default, 1000000; -1: unchanged)")
	weight := fs.Int("weight", 0, "fair-share weight (1-1000)")
	exhausted := fs.String("exhausted", "", `when the budget is spent: "queue" (park runs) or "fail"`)
	return func() wire.TenantRequest {
		var r wire.TenantRequest
		if *tokens >= 0 || *window != "" {
			r.Budget = &wire.BudgetSpec{}
			if *tokens >= 0 {
				r.Budget.Tokens = tokens
			}
			if *window != "" {
				r.Budget.Window = window
			}
		}
		if *tpm >= 0 {
			r.TokensPerMinute = tpm
		}
		if *maxConc >= 0 {
			r.MaxConcurrentRuns = maxConc
		}
		if *maxQueued >= 0 {
			r.MaxQueuedRuns = maxQueued
		}
		if *weight != 0 {
			r.Weight = weight
		}
		if *exhausted != "" {
			r.Exhausted = exhausted
		}
		return r
	}
}

func (e cliEnv) tenantsCmd() *cobra.Command {
	return group("tenants", "Administer tenants: budgets, limits, keys, NATS creds (admin token)",
		leaf("create [flags] ID", "Create a tenant; prints it, and its API key once on stderr",
			"agentctl tenants create --tokens 1000000 --window day acme\nagentctl tenants create --max-concurrent 10 --exhausted fail beta",
			func(fs *pflag.FlagSet) runFunc {
				get := tenantSettings(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants create takes one tenant ID")
					}
					req := get()
					req.ID = pos[0]
					t, err := e.client().CreateTenant(ctx, req)
					if err != nil {
						return err
					}
					if err := writeJSON(e.stdout, t); err != nil {
						return err
					}
					fmt.Fprintf(e.stderr, "API key of %s (shown once): %s\n", t.ID, t.APIKey)
					if t.CallbackSecret != "" {
						fmt.Fprintf(e.stderr, "callback secret of %s (shown once): %s\n", t.ID, t.CallbackSecret)
					}
					return nil
				}
			}),
		leaf("show [flags] ID", "Show a tenant with its budget's use, as JSON",
			"agentctl tenants show acme",
			func(fs *pflag.FlagSet) runFunc {
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants show takes one tenant ID")
					}
					t, err := e.client().GetTenant(ctx, pos[0])
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, t)
				}
			}),
		aliases(leaf("set-budget [flags] ID", "Change a tenant's budget and limits (the flags given only)",
			"agentctl tenants set-budget --tokens 5000000 acme\nagentctl tenants set-budget --weight 4 --max-queued 10000 acme",
			func(fs *pflag.FlagSet) runFunc {
				get := tenantSettings(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants set-budget takes one tenant ID")
					}
					req := get()
					if req == (wire.TenantRequest{}) {
						return usagef("tenants set-budget: give at least one of --tokens, --window, --tokens-per-minute, --max-concurrent, --max-queued, --weight, --exhausted")
					}
					t, err := e.client().UpdateTenant(ctx, pos[0], req)
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, t)
				}
			}), "update"),
		leaf("usage [flags] ID", "Show a tenant's token use by model or by run, as JSON",
			"agentctl tenants usage acme\nagentctl tenants usage --by run acme",
			func(fs *pflag.FlagSet) runFunc {
				by := fs.String("by", "model", `group by "model" or "run"`)
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants usage takes one tenant ID")
					}
					u, err := e.client().Usage(ctx, pos[0], *by)
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, u)
				}
			}),
		leaf("callback-secret ID", "Rotate the secret a tenant's callbacks are signed with; prints the new one",
			"agentctl tenants callback-secret acme > callback.secret",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants callback-secret takes one tenant ID")
					}
					v, err := e.client().RotateCallbackSecret(ctx, pos[0])
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stderr, "new callback secret of %s (shown once; callbacks are signed with it from now on):\n", v.Tenant)
					fmt.Fprintln(e.stdout, v.CallbackSecret)
					return nil
				}
			}),
		e.tenantKeysCmd(),
		e.tenantNATSCredsCmd(),
	)
}

// tenantKeysCmd is `agentctl tenants keys create|ls|revoke`.
func (e cliEnv) tenantKeysCmd() *cobra.Command {
	return group("keys", "Create, list and revoke a tenant's API keys",
		leaf("create [flags] ID", "Create an API key of a tenant; prints it, the key once on stderr",
			"agentctl tenants keys create --name ci --scopes submit,read acme",
			func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "what the key is for, e.g. ci (required)")
				scopes := fs.String("scopes", "", "what the key may do, comma-separated: admin, submit, read (default: all three)")
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 || *name == "" {
						return usagef("tenants keys create takes one tenant ID and --name NAME")
					}
					var list []string
					for sc := range strings.SplitSeq(*scopes, ",") {
						if sc = strings.TrimSpace(sc); sc != "" {
							list = append(list, sc)
						}
					}
					if *scopes != "" && len(list) == 0 {
						return usagef("--scopes %q names none of admin, submit, read (leave it out for all three)", *scopes)
					}
					k, err := e.client().CreateKey(ctx, pos[0], *name, list...)
					if err != nil {
						return err
					}
					if err := writeJSON(e.stdout, k); err != nil {
						return err
					}
					fmt.Fprintf(e.stderr, "API key %s of %s (shown once): %s\n", k.ID, pos[0], k.APIKey)
					return nil
				}
			}),
		aliases(leaf("ls [flags] ID", "List a tenant's API keys (never the keys themselves)",
			"agentctl tenants keys ls acme\nagentctl tenants keys ls --json acme",
			func(fs *pflag.FlagSet) runFunc {
				limit := fs.Int("limit", 50, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("tenants keys ls takes one tenant ID")
					}
					list, err := e.client().ListKeys(ctx, pos[0], client.ListKeysParams{Limit: *limit, Cursor: *cursor})
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED")
					for _, k := range list.Keys {
						used := "never"
						if k.LastUsedAt != nil {
							used = k.LastUsedAt.Local().Format(time.DateTime)
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), k.CreatedAt.Local().Format(time.DateTime), used)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl tenants keys ls --cursor %s %s\n", list.NextCursor, pos[0])
					}
					return nil
				}
			}), "list"),
		aliases(leaf("revoke ID KEY_ID", "Revoke a tenant's API key at once",
			"agentctl tenants keys revoke acme key_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 2 {
						return usagef("tenants keys revoke takes a tenant ID and a KEY_ID (from tenants keys ls)")
					}
					if err := e.client().RevokeKey(ctx, pos[0], pos[1]); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "key %s of %s revoked\n", pos[1], pos[0])
					return nil
				}
			}), "rm"),
	)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
