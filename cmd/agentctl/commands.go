package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

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

// parse parses flags wherever they appear among the arguments, so
// `agentctl run "hello" --wait` works as well as `agentctl run --wait
// "hello"`.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (e cliEnv) cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
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
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("run takes one MESSAGE (quote it), got %d arguments", len(pos))
	}
	req := wire.RunCreateRequest{Agent: *agent, Message: pos[0], SessionID: *session, MaxTurns: *maxTurns,
		MaxTokens: *maxTokens, Timeout: *timeout, IdempotencyKey: *idem, CallbackURL: *callback}
	if *contextJSON != "" {
		if !json.Valid([]byte(*contextJSON)) {
			return usagef("--context is not valid JSON")
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

func (e cliEnv) cmdWatch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "NDJSON events, then the run")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("watch takes one RUN id")
	}
	return e.follow(ctx, e.client(), pos[0], *asJSON, false)
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

func (e cliEnv) cmdRuns(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("runs needs a subcommand: ls, show, steps, cancel or rm")
	}
	c := e.client()
	switch args[0] {
	case "ls", "list":
		fs := flag.NewFlagSet("runs ls", flag.ContinueOnError)
		status := fs.String("status", "", "filter by status (comma-separated)")
		agent := fs.String("agent", "", "filter by agent")
		session := fs.String("session", "", "filter by session")
		parent := fs.String("parent", "", "list the children of this run")
		limit := fs.Int("limit", 20, "page size")
		cursor := fs.String("cursor", "", "page cursor from a previous listing")
		asJSON := fs.Bool("json", false, "JSON output")
		if _, err := parse(fs, args[1:]); err != nil {
			return err
		}
		p := client.ListRunsParams{Agent: *agent, SessionID: *session, ParentRunID: *parent, Limit: *limit, Cursor: *cursor}
		if *status != "" {
			for _, s := range strings.Split(*status, ",") {
				p.Status = append(p.Status, agentfleet.RunStatus(strings.TrimSpace(s)))
			}
		}
		list, err := c.ListRuns(ctx, p)
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
	case "show":
		fs := flag.NewFlagSet("runs show", flag.ContinueOnError)
		_ = fs.Bool("json", true, "JSON output (the default)")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("runs show takes one RUN id")
		}
		run, err := c.GetRun(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, run)
	case "steps":
		return e.runSteps(ctx, c, args[1:])
	case "cancel":
		if len(args) != 2 {
			return usagef("runs cancel takes one RUN id")
		}
		run, err := c.CancelRun(ctx, args[1])
		if err != nil {
			return err
		}
		if run.Status == agentfleet.StatusCancelled {
			fmt.Fprintf(e.stdout, "run %s cancelled\n", run.ID)
		} else {
			fmt.Fprintf(e.stdout, "run %s will stop at its next turn boundary\n", run.ID)
		}
		return nil
	case "rm":
		if len(args) != 2 {
			return usagef("runs rm takes one RUN id")
		}
		if err := c.DeleteRun(ctx, args[1]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "run %s deleted\n", args[1])
		return nil
	}
	return usagef("unknown runs subcommand %q (ls, show, steps, cancel, rm)", args[0])
}

func (e cliEnv) cmdTenants(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("tenants needs a subcommand: create, show, set-budget, usage, keys, callback-secret or nats-creds")
	}
	c := e.client()
	settings := func(fs *flag.FlagSet) func() wire.TenantRequest {
		tokens := fs.Int64("tokens", -1, "token limit per window (0: unlimited)")
		window := fs.String("window", "", `budget window: "day", "month" or a duration like "24h"`)
		tpm := fs.Int64("tokens-per-minute", -1, "tokens-per-minute limit (0: none)")
		maxConc := fs.Int("max-concurrent", -1, "max concurrent runs (0: no limit)")
		maxQueued := fs.Int("max-queued", -1, "max runs not finished, queued included (0: the default, 1000000)")
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
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
		get := settings(fs)
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("tenants create takes one tenant ID")
		}
		req := get()
		req.ID = pos[0]
		t, err := c.CreateTenant(ctx, req)
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
	case "show":
		fs := flag.NewFlagSet("tenants show", flag.ContinueOnError)
		_ = fs.Bool("json", true, "JSON output (the default)")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("tenants show takes one tenant ID")
		}
		t, err := c.GetTenant(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, t)
	case "set-budget", "update":
		fs := flag.NewFlagSet("tenants set-budget", flag.ContinueOnError)
		get := settings(fs)
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("tenants set-budget takes one tenant ID")
		}
		req := get()
		if req == (wire.TenantRequest{}) {
			return usagef("tenants set-budget: give at least one of --tokens, --window, --tokens-per-minute, --max-concurrent, --max-queued, --weight, --exhausted")
		}
		t, err := c.UpdateTenant(ctx, pos[0], req)
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, t)
	case "usage":
		fs := flag.NewFlagSet("tenants usage", flag.ContinueOnError)
		by := fs.String("by", "model", `group by "model" or "run"`)
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("tenants usage takes one tenant ID")
		}
		u, err := c.Usage(ctx, pos[0], *by)
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, u)
	case "callback-secret":
		if len(args) != 2 {
			return usagef("tenants callback-secret takes one tenant ID")
		}
		v, err := c.RotateCallbackSecret(ctx, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "new callback secret of %s (shown once; callbacks are signed with it from now on):\n", v.Tenant)
		fmt.Fprintln(e.stdout, v.CallbackSecret)
		return nil
	case "keys":
		return e.cmdTenantKeys(ctx, c, args[1:])
	case "nats-creds":
		return e.cmdTenantNATSCreds(ctx, c, args[1:])
	}
	return usagef("unknown tenants subcommand %q (create, show, set-budget, usage, keys, callback-secret, nats-creds)", args[0])
}

// cmdTenantKeys is `agentctl tenants keys create|ls|revoke`.
func (e cliEnv) cmdTenantKeys(ctx context.Context, c *client.Client, args []string) error {
	if len(args) == 0 {
		return usagef("tenants keys needs a subcommand: create, ls or revoke")
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("tenants keys create", flag.ContinueOnError)
		name := fs.String("name", "", "what the key is for, e.g. ci (required)")
		scopes := fs.String("scopes", "", "what the key may do, comma-separated: admin, submit, read (default: all three)")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
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
			return usagef("--scopes names at least one of admin, submit, read (leave it out for all three)")
		}
		k, err := c.CreateKey(ctx, pos[0], *name, list...)
		if err != nil {
			return err
		}
		if err := writeJSON(e.stdout, k); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "API key %s of %s (shown once): %s\n", k.ID, pos[0], k.APIKey)
		return nil
	case "ls", "list":
		fs := flag.NewFlagSet("tenants keys ls", flag.ContinueOnError)
		limit := fs.Int("limit", 50, "page size")
		cursor := fs.String("cursor", "", "page cursor from a previous listing")
		asJSON := fs.Bool("json", false, "JSON output")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("tenants keys ls takes one tenant ID")
		}
		list, err := c.ListKeys(ctx, pos[0], client.ListKeysParams{Limit: *limit, Cursor: *cursor})
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
	case "revoke", "rm":
		if len(args) != 3 {
			return usagef("tenants keys revoke takes a tenant ID and a KEY_ID (from tenants keys ls)")
		}
		if err := c.RevokeKey(ctx, args[1], args[2]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "key %s of %s revoked\n", args[2], args[1])
		return nil
	}
	return usagef("unknown tenants keys subcommand %q (create, ls, revoke)", args[0])
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
