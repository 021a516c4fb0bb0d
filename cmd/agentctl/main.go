// Command agentctl is the agentfleet CLI: submit and watch runs, list and
// cancel them, chat (a run a line, in a session) and read and delete
// sessions, submit batches and gather their results, administer tenants,
// agents, secrets and webhook triggers (and send signed deliveries to
// them), run the whole fleet in one process (agentctl dev) and measure it
// (agentctl bench).
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

	"github.com/agentfleet/agentfleet/internal/bench"
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

const usage = `agentctl — the agentfleet CLI

Usage:
  agentctl run [--agent A] [--session S] [--context JSON] [--max-turns N] [--max-tokens N]
               [--timeout D] [--idempotency-key K] [--callback-url U] [--wait] [--json] MESSAGE
  agentctl watch [--json] RUN
  agentctl runs ls [--status S[,S]] [--agent A] [--session S] [--parent RUN] [--limit N] [--cursor C] [--json]
  agentctl runs show [--json] RUN
  agentctl runs steps [--turn N] [--json] RUN
  agentctl runs cancel RUN
  agentctl runs rm RUN
  agentctl chat [--agent A] [--session S]   (a message a line on stdin; /new, /exit)
  agentctl sessions ls [--agent A] [--limit N] [--cursor C] [--tenant T] [--json]
  agentctl sessions show|rm [--tenant T] [--json] SESSION
  agentctl tenants create [--tokens N] [--window W] [--tokens-per-minute N]
                          [--max-concurrent N] [--max-queued N] [--weight N]
                          [--exhausted queue|fail] ID
  agentctl tenants show [--json] ID
  agentctl tenants set-budget [--tokens N] [--window W] [--tokens-per-minute N]
                              [--max-concurrent N] [--max-queued N] [--weight N]
                              [--exhausted queue|fail] ID
  agentctl tenants usage [--by model|run] ID
  agentctl tenants callback-secret ID
  agentctl tenants nats-creds [--ttl D] [-o FILE] ID   (admin; --revoke revokes all issued)
  agentctl nats-auth [--account NAME] [--resolver-dir D] [--force | --if-missing] DIR
  agentctl triggers create [--scheme github|standard|stripe|hmac] [--agent A] [--message T] [--session T]
                           [--events E[,E]] [--secret S] [--max-turns N] [--max-tokens N] NAME
  agentctl triggers ls|show|rm [--json] [ID]
  agentctl triggers set [--enabled=false] [--rotate-secret] [--message T] [--events E[,E]] [...] ID
  agentctl triggers deliveries [--limit N] [--cursor C] [--json] ID
  agentctl triggers redeliver ID DELIVERY
  agentctl triggers test [--event E] [--file payload.json] ID
  agentctl triggers send [--secret S] [--event E] [--delivery D] [--scheme S] --file payload.json ID
  agentctl agents apply -f agent.yaml|agent.json|- [NAME]
  agentctl agents ls [--limit N] [--cursor C] [--json]
  agentctl agents show [--version N] NAME
  agentctl agents rm NAME
  agentctl batch submit [--agent A] [--max-concurrent N] [--max-turns N] [--max-tokens N]
                       [--idempotency-key K] [--callback-url U] [--wait] [--out results.jsonl] inputs.jsonl
  agentctl batch ls [--limit N] [--cursor C] [--json]
  agentctl batch show [--json] BATCH
  agentctl batch results [--wait] [--after INDEX] [--out FILE] BATCH
  agentctl batch cancel|retry BATCH
  agentctl approvals ls [--status pending|approved|denied|all] [--run R] [--tenant T] [--json]
  agentctl approvals show ID
  agentctl approvals approve [--reason R] [--scope session] ID
  agentctl approvals deny [--reason R] ID
  agentctl secrets set [--tenant T] --host H [--host H2] [--header H] [--format F] [--expose]
                      [--from-file PATH] NAME   (the value on stdin, or in the file)
  agentctl secrets ls|show|rm [--tenant T] [--json] [NAME]
  agentctl secrets rekey [--json]   (admin)
  agentctl tenants keys create --name N [--scopes admin,submit,read] ID
  agentctl tenants keys ls [--limit N] [--cursor C] [--json] ID
  agentctl tenants keys revoke ID KEY_ID
  agentctl dev [--demo]
  agentctl bench [throughput|latency|scale|fairness|chaos|fanout|webhooks|batch|session] [--runs N] [--turns T]
                 [--model-latency D] [--workers W] [--slots S] [--json] [...]
                 ('agentctl bench -h' for all flags)

Environment:
  AGENTFLEET_URL    the dispatcher (default http://127.0.0.1:8080)
  AGENTFLEET_TOKEN  a tenant API key, or the admin token for 'tenants'
                    (a tenant's own key may show it and manage its keys)
  AGENTFLEET_TRIGGER_SECRET  the secret 'triggers send' signs with

'run --wait' prints events to stderr and the answer alone to stdout, and exits
0 completed, 1 failed, 2 max turns, 3 usage error, 4 cancelled, 5 budget.
'batch submit --wait' draws a progress bar on a terminal (plain lines on stderr
otherwise, with the results as JSONL on stdout unless --out) and exits with the
code of the worst status among the runs: failed, then cancelled, then max turns.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command-line mistake: printed with a hint, exit 3.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	env := cliEnv{stdout: stdout, stderr: stderr}
	var err error
	switch args[0] {
	case "run":
		err = env.cmdRun(ctx, args[1:])
	case "watch":
		err = env.cmdWatch(ctx, args[1:])
	case "runs":
		err = env.cmdRuns(ctx, args[1:])
	case "tenants":
		err = env.cmdTenants(ctx, args[1:])
	case "triggers":
		err = env.cmdTriggers(ctx, args[1:])
	case "agents":
		err = env.cmdAgents(ctx, args[1:])
	case "batch":
		err = env.cmdBatch(ctx, args[1:])
	case "approvals":
		err = env.cmdApprovals(ctx, args[1:])
	case "secrets":
		err = env.cmdSecrets(ctx, args[1:])
	case "sessions":
		err = env.cmdSessions(ctx, args[1:])
	case "chat":
		err = env.cmdChat(ctx, args[1:])
	case "dev":
		err = env.cmdDev(ctx, args[1:])
	case "nats-auth":
		err = env.cmdNATSAuth(ctx, args[1:])
	case "bench":
		err = env.cmdBench(ctx, args[1:])
	case bench.RoleCommand:
		// Hidden: this binary as one process of a fleet the bench
		// spawns (agentctl __serve nats|dispatcher|worker).
		err = bench.ServeRole(ctx, args[1:], stdout, stderr)
	default:
		err = usagef("unknown command %q", args[0])
	}
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "agentctl: %s\nRun 'agentctl --help' for usage.\n", ue.msg)
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
