package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// triggerFlags are the settings create and set share; each returns the
// request fields the user gave.
func triggerFlags(fs *pflag.FlagSet) func() wire.TriggerRequest {
	var set = map[string]bool{}
	name := fs.String("name", "", "the trigger's name ({{.trigger}} in templates)")
	agent := fs.String("agent", "", "agent the runs use (default: the tenant's default agent)")
	message := fs.String("message", "", `message template, e.g. "Review PR {{.payload.number}}"`)
	session := fs.String("session", "", `session_id template, e.g. "{{slug .payload.repository.full_name}}"`)
	events := fs.String("events", "", `events to take, comma-separated ("push,pull_request.opened"; empty: all)`)
	secret := fs.String("secret", "", "the secret the sender signs with (default: one is generated and shown once)")
	maxTurns := fs.Int("max-turns", 0, "turn cap of each run (0: the agent's)")
	maxTokens := fs.Int64("max-tokens", 0, "token cap of each run (0: none)")
	maxBody := fs.Int64("max-body-bytes", 0, "largest delivery body (0: 1 MiB; at most 25 MiB)")
	enabled := fs.Bool("enabled", true, "whether deliveries are taken")
	callback := fs.String("callback-url", "", "receives the final view of each run the trigger starts")
	return func() wire.TriggerRequest {
		fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
		var r wire.TriggerRequest
		str := func(flagName string, v *string) *string {
			if set[flagName] {
				return v
			}
			return nil
		}
		r.Name, r.Agent, r.Message, r.SessionID, r.Secret = str("name", name), str("agent", agent), str("message", message), str("session", session), str("secret", secret)
		r.CallbackURL = str("callback-url", callback)
		if set["events"] {
			ev := []string{}
			for _, e := range strings.Split(*events, ",") {
				if e = strings.TrimSpace(e); e != "" {
					ev = append(ev, e)
				}
			}
			r.Events = &ev
		}
		if set["max-turns"] {
			r.MaxTurns = maxTurns
		}
		if set["max-tokens"] {
			r.MaxTokens = maxTokens
		}
		if set["max-body-bytes"] {
			r.MaxBodyBytes = maxBody
		}
		if set["enabled"] {
			r.Enabled = enabled
		}
		return r
	}
}

func (e cliEnv) triggersCmd() *cobra.Command {
	one := func(name string, pos []string) (string, error) {
		if len(pos) != 1 {
			return "", usagef("triggers %s takes one trigger ID", name)
		}
		return pos[0], nil
	}
	return group("triggers", "Webhook triggers: signed deliveries that start runs",
		leaf("create [flags] NAME", "Create a trigger; prints it, its secret once and its URL on stderr",
			`agentctl triggers create --events issues.opened --message "Triage issue {{.payload.issue.number}}" triage-issues
agentctl triggers create --scheme hmac --agent billing --session "{{.payload.customer}}" invoices`,
			func(fs *pflag.FlagSet) runFunc {
				scheme := fs.String("scheme", "github", "how the sender signs: github, standard, stripe or hmac")
				get := triggerFlags(fs)
				return func(ctx context.Context, pos []string) error {
					req := get()
					if len(pos) == 1 && req.Name == nil {
						req.Name = &pos[0]
					} else if len(pos) > 0 || req.Name == nil {
						return usagef("triggers create takes one NAME (or --name)")
					}
					req.Scheme = scheme
					c := e.client()
					t, err := c.CreateTrigger(ctx, req)
					if err != nil {
						return err
					}
					if err := writeJSON(e.stdout, t); err != nil {
						return err
					}
					if t.Secret != "" {
						fmt.Fprintf(e.stderr, "secret of trigger %s (shown once): %s\n", t.ID, t.Secret)
					}
					fmt.Fprintf(e.stderr, "deliveries go to: %s\n", hookURL(c, t.URL))
					return nil
				}
			}),
		aliases(leaf("ls [flags]", "List triggers with their hook URLs",
			"agentctl triggers ls\nagentctl triggers ls --json",
			func(fs *pflag.FlagSet) runFunc {
				limit := fs.Int("limit", 50, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					c := e.client()
					list, err := c.ListTriggers(ctx, *limit, *cursor)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tSCHEME\tAGENT\tEVENTS\tENABLED\tURL")
					for _, t := range list.Triggers {
						events := strings.Join(t.Events, ",")
						if events == "" {
							events = "*"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\n", t.ID, t.Name, t.Scheme, t.Agent, events, t.Enabled, hookURL(c, t.URL))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl triggers ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		leaf("show [flags] ID", "Show a trigger as JSON",
			"agentctl triggers show trg_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				jsonFlag(fs)
				return func(ctx context.Context, pos []string) error {
					id, err := one("show", pos)
					if err != nil {
						return err
					}
					t, err := e.client().GetTrigger(ctx, id)
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, t)
				}
			}),
		aliases(leaf("set [flags] ID", "Change a trigger (the flags given only), or rotate its secret",
			"agentctl triggers set --enabled=false trg_01JD3X\nagentctl triggers set --rotate-secret trg_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				rotate := fs.Bool("rotate-secret", false, "replace the secret with a generated one (the old one is accepted for 24h more)")
				get := triggerFlags(fs)
				return func(ctx context.Context, pos []string) error {
					id, err := one("set", pos)
					if err != nil {
						return err
					}
					req := get()
					req.RotateSecret = *rotate
					t, err := e.client().UpdateTrigger(ctx, id, req)
					if err != nil {
						return err
					}
					if err := writeJSON(e.stdout, t); err != nil {
						return err
					}
					if t.Secret != "" {
						fmt.Fprintf(e.stderr, "new secret of trigger %s (shown once; the old one is accepted until %s): %s\n",
							t.ID, t.PreviousSecretExpiresAt.Local().Format(time.DateTime), t.Secret)
					}
					return nil
				}
			}), "update"),
		aliases(leaf("rm ID", "Delete a trigger",
			"agentctl triggers rm trg_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					id, err := one("rm", pos)
					if err != nil {
						return err
					}
					if err := e.client().DeleteTrigger(ctx, id); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "trigger %s deleted\n", id)
					return nil
				}
			}), "delete"),
		leaf("deliveries [flags] ID", "List a trigger's deliveries: what came, and the run it started or why not",
			"agentctl triggers deliveries trg_01JD3X\nagentctl triggers deliveries --json trg_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				limit := fs.Int("limit", 20, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, pos []string) error {
					id, err := one("deliveries", pos)
					if err != nil {
						return err
					}
					list, err := e.client().ListDeliveries(ctx, id, *limit, *cursor)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "RECEIVED\tOUTCOME\tEVENT\tDELIVERY\tRUN\tREASON")
					for _, d := range list.Deliveries {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.ReceivedAt.Local().Format(time.DateTime), d.Outcome, d.Event, d.Delivery, d.RunID, d.Reason)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl triggers deliveries %s --cursor %s\n", id, list.NextCursor)
					}
					return nil
				}
			}),
		leaf("redeliver ID DELIVERY", "Deliver a recorded delivery again, as if it came anew",
			"agentctl triggers redeliver trg_01JD3X 72d3162e-cc78-11e3-81ab-4c9367dc0958",
			func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 2 {
						return usagef("triggers redeliver takes a trigger ID and a DELIVERY id")
					}
					ans, err := e.client().Redeliver(ctx, pos[0], pos[1])
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, ans)
				}
			}),
		leaf("test [flags] ID", "Send a test delivery, signed by the server, through the trigger",
			"agentctl triggers test trg_01JD3X\nagentctl triggers test --event pull_request --file pr.json trg_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				event := fs.String("event", "", "the delivery's event (GitHub: the X-GitHub-Event, e.g. pull_request)")
				file := fs.String("file", "", "the payload, a JSON file (- for stdin; default {})")
				return func(ctx context.Context, pos []string) error {
					id, err := one("test", pos)
					if err != nil {
						return err
					}
					req := wire.TriggerTestRequest{Event: *event}
					if *file != "" {
						if req.Payload, err = readPayload(*file); err != nil {
							return err
						}
					}
					ans, err := e.client().TestTrigger(ctx, id, req)
					if err != nil {
						return err
					}
					return writeJSON(e.stdout, ans)
				}
			}),
		e.triggersSendCmd(),
	)
}

// triggersSendCmd signs a payload as the trigger's sender would and
// posts it to the hook: what GitHub (or Stripe, or a Standard Webhooks
// sender) does, from the command line.
func (e cliEnv) triggersSendCmd() *cobra.Command {
	return leaf("send [flags] ID", "Sign a payload as the trigger's sender would and post it to the hook",
		"AGENTFLEET_TRIGGER_SECRET=$SECRET agentctl triggers send --event issues --file issue.json trg_01JD3X",
		func(fs *pflag.FlagSet) runFunc {
			secret := fs.String("secret", os.Getenv("AGENTFLEET_TRIGGER_SECRET"), "the trigger's secret (default: $AGENTFLEET_TRIGGER_SECRET)")
			event := fs.String("event", "", "the delivery's event (GitHub: pull_request, push, ...)")
			file := fs.String("file", "", "the payload, a JSON file (- for stdin)")
			delivery := fs.String("delivery", "", "the delivery id (default: a random one; repeat one to see the dedupe)")
			scheme := fs.String("scheme", "", "the trigger's scheme (default: read from the trigger with AGENTFLEET_TOKEN)")
			return func(ctx context.Context, pos []string) error {
				switch {
				case len(pos) != 1:
					return usagef("triggers send takes one trigger ID")
				case *secret == "":
					return usagef("triggers send needs the trigger's secret: --secret or AGENTFLEET_TRIGGER_SECRET")
				case *file == "":
					return usagef("triggers send needs --file payload.json (- for stdin)")
				}
				return e.sendHook(ctx, e.client(), pos[0], *secret, *event, *file, *delivery, *scheme)
			}
		})
}

func (e cliEnv) sendHook(ctx context.Context, c *client.Client, id, secret, event, file, delivery, scheme string) error {
	if scheme == "" {
		if c.Token == "" {
			return usagef("triggers send: give --scheme, or set AGENTFLEET_TOKEN so the trigger can be read")
		}
		t, err := c.GetTrigger(ctx, id)
		if err != nil {
			return err
		}
		scheme = t.Scheme
	}
	if !webhook.Scheme(scheme).Valid() {
		return usagef("--scheme %q is not one of github, standard, stripe, hmac", scheme)
	}
	body, err := readPayload(file)
	if err != nil {
		return err
	}
	if delivery == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		delivery = "cli-" + hex.EncodeToString(b)
	}
	h, err := webhook.Sign(webhook.Scheme(scheme), secret, body, delivery, event, time.Now())
	if err != nil {
		return usagef("sign: %v", err)
	}
	// The hook takes no bearer token: the signature is the credential.
	hook := client.New(c.BaseURL, "")
	hook.HTTP = c.HTTP
	res, err := hook.SendHook(ctx, "/v1/hooks/"+id, h, body)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "HTTP %d\n", res.Status)
	return writeJSON(e.stdout, res.Answer)
}

// readPayload reads a JSON payload from path ("-": stdin).
func readPayload(path string) (json.RawMessage, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	if !json.Valid(b) {
		return nil, usagef("%s is not JSON", path)
	}
	return b, nil
}

// hookURL is a trigger's hook as a sender reaches it.
func hookURL(c *client.Client, u string) string {
	if strings.HasPrefix(u, "/") {
		return c.BaseURL + u
	}
	return u
}
