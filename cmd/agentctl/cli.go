package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/internal/bench"
)

// The command tree is the one place a command is declared: dispatch,
// --help, `agentctl help`, shell completion and docs/cli.md's reference
// all read it, and TestHelpEveryCommand walks it, so a command cannot be
// added without a usage line, a description and an example.

func init() {
	// Commands are listed in the order the tree declares them.
	cobra.EnableCommandSorting = false
}

// runFunc runs a leaf command with its positional arguments.
type runFunc func(ctx context.Context, args []string) error

// leaf declares a command that runs: setup declares its flags on fs and
// returns what runs it. A use line with no positional placeholder
// (only "[flags]") takes no arguments.
func leaf(use, short, example string, setup func(fs *pflag.FlagSet) runFunc) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Example: example}
	c.Flags().SortFlags = false // help lists them as declared, related ones together
	run := setup(c.Flags())
	c.Args = func(c *cobra.Command, args []string) error {
		if !takesArgs(c.Use) && len(args) > 0 {
			return usagef("%s takes no arguments (got %q)", commandName(c), args[0])
		}
		return nil
	}
	c.RunE = func(c *cobra.Command, args []string) error { return run(c.Context(), args) }
	return c
}

// takesArgs reports whether a use line names positional arguments.
func takesArgs(use string) bool {
	for _, w := range strings.Fields(use)[1:] {
		if w != "[flags]" {
			return true
		}
	}
	return false
}

// aliases gives c other names (ls is also list, rm also delete).
func aliases(c *cobra.Command, names ...string) *cobra.Command {
	c.Aliases = names
	return c
}

// long adds a description longer than the one line of short.
func long(c *cobra.Command, text string) *cobra.Command {
	c.Long = strings.TrimSpace(text)
	return c
}

// group declares a command that only holds subcommands; run without one,
// or with one it does not know, it is a usage error naming them. Its
// examples are the first of each subcommand's.
func group(name, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: name + " COMMAND", Short: short, Args: cobra.ArbitraryArgs}
	c.AddCommand(subs...)
	var ex []string
	for _, s := range subs {
		ex = append(ex, strings.SplitN(s.Example, "\n", 2)[0])
	}
	c.Example = strings.Join(ex, "\n")
	c.RunE = func(c *cobra.Command, args []string) error {
		names := subNames(c)
		if len(args) == 0 {
			return usagef("%s needs a subcommand: %s", commandName(c), orList(names))
		}
		return usagef("unknown %s subcommand %q%s: use %s", commandName(c), args[0], suggest(c, args[0]), orList(names))
	}
	return c
}

// suggest is " (did you mean X?)" for a subcommand of c near typed.
func suggest(c *cobra.Command, typed string) string {
	c.SuggestionsMinimumDistance = 2
	if s := c.SuggestionsFor(typed); len(s) > 0 {
		return fmt.Sprintf(" (did you mean %s?)", s[0])
	}
	return ""
}

func subNames(c *cobra.Command) []string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}

func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// commandName is c's path without "agentctl ": "batch submit".
func commandName(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

const rootLong = `agentctl — the agentfleet CLI: submit and watch runs, chat, run batches,
administer tenants, agents, secrets and webhook triggers, run the whole fleet
in one process (agentctl dev) and measure it (agentctl bench).

Environment:
  AGENTFLEET_URL    the dispatcher (default http://127.0.0.1:8080)
  AGENTFLEET_TOKEN  a tenant API key, or the admin token for 'tenants'
                    (a tenant's own key may show it and manage its keys)
  AGENTFLEET_TRIGGER_SECRET  the secret 'triggers send' signs with

Exit codes: 0 ok (a run completed), 1 failed, 2 max turns, 3 usage error,
4 cancelled, 5 budget. 'run --wait' prints events to stderr and the answer
alone to stdout; 'batch submit --wait' exits with the code of the worst
status among its runs (failed, then cancelled, then max turns).
Every read command takes --json.`

// newRoot builds the command tree, its commands writing to e.
func (e cliEnv) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:     "agentctl COMMAND",
		Short:   "The agentfleet CLI",
		Long:    rootLong,
		Example: "agentctl run --wait \"List the prime numbers below 50\"\nagentctl help batch submit",
		Args:    cobra.ArbitraryArgs,
		// Our errors, our exit codes: cobra prints neither.
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true, // completionCmd below, with its example
		},
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				writeHelp(c.OutOrStdout(), c)
				return exitError{code: exitUsage}
			}
			return usagef("unknown command %q%s", args[0], suggest(c, args[0]))
		},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c) })
	root.SetHelpCommand(helpCmd())
	root.AddCommand(
		e.runCmd(),
		e.watchCmd(),
		e.runsCmd(),
		e.chatCmd(),
		e.sessionsCmd(),
		e.batchCmd(),
		e.tenantsCmd(),
		e.agentsCmd(),
		e.approvalsCmd(),
		e.secretsCmd(),
		e.skillsCmd(),
		e.triggersCmd(),
		e.natsAuthCmd(),
		e.devCmd(),
		e.benchCmd(),
		completionCmd(),
		&cobra.Command{
			// This binary as one process of a fleet the bench spawns
			// (agentctl __serve nats|dispatcher|worker); its own flags.
			Use: bench.RoleCommand, Hidden: true, DisableFlagParsing: true,
			RunE: func(c *cobra.Command, args []string) error {
				return bench.ServeRole(c.Context(), args, e.stdout, e.stderr)
			},
		},
	)
	return root
}

// helpCmd is `agentctl help [COMMAND...]`: what COMMAND --help prints.
func helpCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND...]",
		Short:   "Show the help of a command",
		Example: "agentctl help\nagentctl help batch submit",
		Args:    cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return subNames(target), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usagef("help: no command %q (agentctl help lists them)", strings.Join(args, " "))
			}
			target.InitDefaultHelpFlag()
			writeHelp(c.OutOrStdout(), target)
			return nil
		},
	}
}

// completionCmd is `agentctl completion bash|zsh|fish`. The scripts ask
// agentctl itself (its hidden __complete command) what completes a word,
// so they follow the tree of the binary on the PATH.
func completionCmd() *cobra.Command {
	var c *cobra.Command
	c = leaf("completion bash|zsh|fish", "Print a shell completion script for commands, subcommands and flags",
		`source <(agentctl completion bash)
agentctl completion zsh > "${fpath[1]}/_agentctl"
agentctl completion fish > ~/.config/fish/completions/agentctl.fish`,
		func(*pflag.FlagSet) runFunc {
			return func(_ context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("completion takes one shell: bash, zsh or fish")
				}
				root, w := c.Root(), c.OutOrStdout()
				switch args[0] {
				case "bash":
					return root.GenBashCompletionV2(w, true)
				case "zsh":
					return root.GenZshCompletion(w)
				case "fish":
					return root.GenFishCompletion(w, true)
				}
				return usagef("completion: no script for shell %q: use bash, zsh or fish", args[0])
			}
		})
	c.ValidArgs = []string{"bash", "zsh", "fish"}
	return long(c, `Prints a completion script for bash, zsh or fish on stdout. Load it in the
shell's start-up file (bash: ~/.bashrc; zsh: a directory of $fpath, with
compinit; fish: ~/.config/fish/completions).`)
}

// writeHelp is a command's help: usage line, description, subcommands,
// flags with their defaults, and examples.
func writeHelp(w io.Writer, c *cobra.Command) {
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "Usage: %s COMMAND\n", c.CommandPath())
	} else {
		fmt.Fprintf(w, "Usage: %s\n", c.UseLine())
	}
	fmt.Fprintf(w, "\n%s\n", cmp.Or(c.Long, c.Short))
	if len(c.Aliases) > 0 {
		fmt.Fprintf(w, "\nAlso: %s\n", strings.Join(c.Aliases, ", "))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		for _, s := range c.Commands() {
			if !s.IsAvailableCommand() && s.Name() != "help" {
				continue
			}
			fmt.Fprintf(w, "  %-16s %s\n", s.Name(), s.Short)
			if s.HasAvailableSubCommands() {
				fmt.Fprintf(w, "  %-16s   %s\n", "", strings.Join(subNames(s), ", "))
			}
		}
	}
	if fl := c.LocalFlags(); fl.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", fl.FlagUsages())
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s", indent(c.Example, "  "))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nRun '%s COMMAND --help' for a command's flags and examples.\n", c.CommandPath())
	}
}

// flagError turns the flag parser's errors into usage errors that name
// the command, the flag and, for a bad value, the value.
func flagError(c *cobra.Command, err error) error {
	var (
		notExist *pflag.NotExistError
		noValue  *pflag.ValueRequiredError
		badValue *pflag.InvalidValueError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &notExist):
		msg = "unknown flag --" + notExist.GetSpecifiedName()
		if short := notExist.GetSpecifiedShortnames(); len(short) > 1 {
			// -json reads as -j -s -o -n, as in kubectl and gh.
			msg = fmt.Sprintf("unknown flag -%s in -%s (a long flag takes two dashes: --%s)", notExist.GetSpecifiedName(), short, short)
		} else if short != "" {
			msg = "unknown flag -" + short
		}
	case errors.As(err, &noValue):
		msg = fmt.Sprintf("flag --%s needs a value", noValue.GetFlag().Name)
	case errors.As(err, &badValue):
		f := badValue.GetFlag()
		msg = fmt.Sprintf("bad value %q for --%s: %s", badValue.GetValue(), f.Name, valueWant(f, errors.Unwrap(err)))
	}
	return usageError{cmd: c.CommandPath(), msg: msg}
}

// valueWant says what a flag takes, for a value it refused.
func valueWant(f *pflag.Flag, cause error) string {
	var ne *strconv.NumError
	switch t := f.Value.Type(); {
	case t == "bool":
		return "want true or false"
	case t == "duration" && (cause == nil || strings.HasPrefix(cause.Error(), "time: ")):
		return "want a duration like 30s, 10m or 2h"
	case errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange):
		return "out of range"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "want a whole number"
	case cause != nil:
		return cause.Error()
	}
	return "not a valid " + f.Value.Type()
}

// jsonFlag is --json on a command whose output is JSON anyway: there for
// scripts that pass it to every read.
func jsonFlag(fs *pflag.FlagSet) {
	fs.Bool("json", true, "JSON output (the default)")
}
