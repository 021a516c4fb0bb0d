// Command agentctl is the agentfleet CLI: submit and watch runs, list and
// cancel them, chat (a run a line, in a session) and read and delete
// sessions, submit batches and gather their results, administer tenants,
// agents, secrets and webhook triggers (and send signed deliveries to
// them), run the whole fleet in one process (agentctl dev) and measure it
// (agentctl bench).
//
// Every command is declared once, in the command tree (cli.go, on
// cobra): dispatch, --help, `agentctl help`, shell completion and
// docs/cli.md's command reference all come from it.
//
// Clients read AGENTFLEET_URL (default http://127.0.0.1:8080) and
// AGENTFLEET_TOKEN (a tenant's API key, or the admin token for tenant
// administration).
//
// Exit codes of `agentctl run --wait`: 0 completed, 1 failed, 2 max
// turns, 3 usage error, 4 cancelled, 5 budget (parked waiting for budget,
// or failed for lack of it).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK        = 0
	exitFailed    = 1
	exitMaxTurns  = 2
	exitUsage     = 3
	exitCancelled = 4
	exitBudget    = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command-line mistake: printed with a hint, exit 3.
// cmd, when set, is the command the message is about ("agentctl batch
// submit"), printed before it.
type usageError struct{ cmd, msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{msg: fmt.Sprintf(format, a...)} }

// exitError carries an exit code decided by a command.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// run is agentctl with args, writing to stdout and stderr; it returns
// the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := cliEnv{stdout: stdout, stderr: stderr}.newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if cmd == nil {
		cmd = root
	}
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		if ue.cmd != "" {
			fmt.Fprintf(stderr, "%s: %s\n", ue.cmd, ue.msg)
		} else {
			fmt.Fprintf(stderr, "agentctl: %s\n", ue.msg)
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "agentctl: %v\n", ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "agentctl: %v\n", err)
		return exitFailed
	}
}
