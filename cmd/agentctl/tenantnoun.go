package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// tenantNoun is a tenant's named thing (a secret, a skill) as its show
// and rm commands see it: its noun, the --tenant flag's help, and the
// client calls that read and delete one.
type tenantNoun struct {
	noun       string // "secret"
	tenantHelp string
	get        func(ctx context.Context, tenant, name string) (any, error)
	del        func(ctx context.Context, tenant, name string) error
}

// oneName is the NAME argument of verb.
func (n tenantNoun) oneName(verb string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("%ss %s takes one %s NAME", n.noun, verb, n.noun)
	}
	return pos[0], nil
}

// showCmd prints one as JSON.
func (e cliEnv) showCmd(n tenantNoun, short, example string) *cobra.Command {
	return leaf("show [flags] NAME", short, example, func(fs *pflag.FlagSet) runFunc {
		tenant := fs.String("tenant", "", n.tenantHelp)
		jsonFlag(fs)
		return func(ctx context.Context, pos []string) error {
			name, err := n.oneName("show", pos)
			if err != nil {
				return err
			}
			v, err := n.get(ctx, *tenant, name)
			if err != nil {
				return err
			}
			return writeJSON(e.stdout, v)
		}
	})
}

// rmCmd deletes one (also `delete`).
func (e cliEnv) rmCmd(n tenantNoun, example string) *cobra.Command {
	return aliases(leaf("rm [flags] NAME", "Delete a "+n.noun, example, func(fs *pflag.FlagSet) runFunc {
		tenant := fs.String("tenant", "", n.tenantHelp)
		return func(ctx context.Context, pos []string) error {
			name, err := n.oneName("rm", pos)
			if err != nil {
				return err
			}
			if err := n.del(ctx, *tenant, name); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s %s deleted\n", n.noun, name)
			return nil
		}
	}), "delete")
}
