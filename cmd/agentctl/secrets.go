package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/wire"
)

const secretTenantHelp = "the tenant whose secrets these are (with the admin token; a tenant's key manages its own)"

// secretStdin is where `secrets set` reads a value given by no file.
var secretStdin io.Reader = os.Stdin

// secretsCmd is `agentctl secrets set|ls|show|rm|rekey`. A value is
// never a flag (it would be in the shell's history and in ps): it comes
// from standard input or --from-file, without one trailing newline.
func (e cliEnv) secretsCmd() *cobra.Command {
	tenantFlag := func(fs *pflag.FlagSet) *string {
		return fs.String("tenant", "", secretTenantHelp)
	}
	return group("secrets", "Credentials agents use and never see, sent to their hosts",
		e.secretsSetCmd(),
		aliases(leaf("ls [flags]", "List secrets (never their values)",
			"agentctl secrets ls\nagentctl secrets ls --tenant acme --json",
			func(fs *pflag.FlagSet) runFunc {
				tenant := tenantFlag(fs)
				limit := fs.Int("limit", 100, "page size")
				cursor := fs.String("cursor", "", "page cursor from a previous listing")
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					list, err := e.client().ListSecrets(ctx, client.ListSecretsParams{Tenant: *tenant, Limit: *limit, Cursor: *cursor})
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, list)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tHOSTS\tHEADER\tEXPOSE\tVERSION\tUPDATED")
					for _, s := range list.Secrets {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%s\n", s.Name, strings.Join(s.Hosts, ","), s.Header, s.Expose, s.Version,
							s.UpdatedAt.Local().Format(time.DateTime))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if list.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: agentctl secrets ls --cursor %s\n", list.NextCursor)
					}
					return nil
				}
			}), "list"),
		e.showCmd(e.secretNoun(), "Show a secret's settings as JSON (never its value)", "agentctl secrets show github_token"),
		e.rmCmd(e.secretNoun(), "agentctl secrets rm github_token"),
		leaf("rekey [flags]", "Rewrite every sealed value under the current key (admin token)",
			"AGENTFLEET_TOKEN=$ADMIN agentctl secrets rekey",
			func(fs *pflag.FlagSet) runFunc {
				asJSON := fs.Bool("json", false, "JSON output")
				return func(ctx context.Context, _ []string) error {
					rep, err := e.client().RekeySecrets(ctx)
					if err != nil {
						return err
					}
					if *asJSON {
						if err := writeJSON(e.stdout, rep); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(e.stdout, "rewrote %d sealed values under key %s (%d were under it already)\n", rep.Rewritten, rep.KeyID, rep.Current)
					}
					if len(rep.Unopened) > 0 {
						for _, r := range rep.Unopened {
							fmt.Fprintf(e.stderr, "not opened: %s %s%s\n", r.Kind, r.Owner, nameSuffix(r.Name))
						}
						return exitError{code: exitFailed, err: fmt.Errorf("%d sealed value(s) open under no key this dispatcher holds (sealed under a key that is in neither AGENTFLEET_SECRETS_KEY nor AGENTFLEET_SECRETS_KEY_PREVIOUS, or altered): they were left as they are; keep the old key in AGENTFLEET_SECRETS_KEY_PREVIOUS until they are rewritten, or set them again", len(rep.Unopened))}
					}
					return nil
				}
			}),
	)
}

// secretNoun is a secret to show and rm.
func (e cliEnv) secretNoun() tenantNoun {
	return tenantNoun{noun: "secret", tenantHelp: secretTenantHelp,
		get: func(ctx context.Context, tenant, name string) (any, error) {
			return e.client().GetSecret(ctx, tenant, name)
		},
		del: func(ctx context.Context, tenant, name string) error {
			return e.client().DeleteSecret(ctx, tenant, name)
		}}
}

func nameSuffix(name string) string {
	if name == "" {
		return ""
	}
	return "/" + name
}

// secretsSetCmd creates or replaces a secret; its value is read from
// --from-file or standard input.
func (e cliEnv) secretsSetCmd() *cobra.Command {
	return leaf("set [flags] NAME", "Create or replace a secret, its value on standard input or in --from-file",
		`printf %s "$GITHUB_TOKEN" | agentctl secrets set --host api.github.com github_token
agentctl secrets set --host api.stripe.com --from-file stripe.key stripe`,
		func(fs *pflag.FlagSet) runFunc {
			var hosts []string
			fs.StringArrayVar(&hosts, "host", nil, "a host whose HTTPS requests get the secret (repeat for more; *.example.com for every host below it)")
			header := fs.String("header", "", "the request header it is sent in (default Authorization)")
			format := fs.String("format", "", `the header's value, with {value} where the secret goes (default "Bearer {value}")`)
			expose := fs.Bool("expose", false, "let scripts read the value with secret(name)")
			fromFile := fs.String("from-file", "", "read the value from this file (default: standard input)")
			tenant := fs.String("tenant", "", "the tenant whose secret this is (with the admin token)")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("secrets set takes one secret NAME, its value on standard input or in --from-file (never as an argument)")
				}
				if len(hosts) == 0 {
					return usagef("secrets set needs --host: a host whose HTTPS requests get the secret (api.github.com)")
				}
				return e.secretsSet(ctx, e.client(), *tenant, pos[0], *fromFile,
					wire.SecretRequest{Hosts: hosts, Header: *header, Format: *format, Expose: *expose})
			}
		})
}

func (e cliEnv) secretsSet(ctx context.Context, c *client.Client, tenant, name, fromFile string, req wire.SecretRequest) error {
	if f, ok := secretStdin.(*os.File); ok && fromFile == "" && isTerminal(f) {
		// Else it would wait in silence; a terminal echoes what is typed.
		fmt.Fprintf(e.stderr, "the value of %s, then Ctrl-D (better: pipe it in, or --from-file):\n", name)
	}
	value, err := readSecretValue(fromFile)
	if err != nil {
		return err
	}
	req.Value = value
	s, err := c.PutSecret(ctx, tenant, name, req)
	if err != nil {
		return err
	}
	if s.Version == 1 {
		fmt.Fprintf(e.stderr, "secret %s created (version 1)\n", s.Name)
	} else {
		fmt.Fprintf(e.stderr, "secret %s is now version %d\n", s.Name, s.Version)
	}
	return writeJSON(e.stdout, s)
}

// readSecretValue reads a value from path ("": standard input), less
// one trailing newline, and refuses an empty one.
func readSecretValue(path string) (string, error) {
	var r io.Reader = secretStdin
	from := "standard input"
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return "", usagef("secrets set: %v", err)
		}
		defer f.Close()
		r, from = f, path
	}
	raw, err := io.ReadAll(io.LimitReader(r, api.SecretValueMax+3))
	if err != nil {
		return "", usagef("secrets set: read %s: %v", from, err)
	}
	v := string(raw)
	if s, ok := strings.CutSuffix(v, "\n"); ok {
		v = strings.TrimSuffix(s, "\r")
	}
	switch {
	case v == "":
		return "", usagef("secrets set: the value from %s is empty: pipe it in (printf %%s \"$TOKEN\" | agentctl secrets set ...) or give --from-file", from)
	case len(v) > api.SecretValueMax:
		return "", usagef("secrets set: the value from %s is longer than %d bytes", from, api.SecretValueMax)
	}
	return v, nil
}
