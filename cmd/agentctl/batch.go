package main

import (
	"context"
	"errors"
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

// batchPoll is how often a waiting `batch submit --wait` reads the
// batch's counts.
var batchPoll = 500 * time.Millisecond

func (e cliEnv) batchCmd() *cobra.Command {
	return group("batch", "Submit batches of runs, follow them and gather their results",
		e.batchSubmitCmd(),
		aliases(leaf("ls [flags]", "List batches, newest first",
			"agentctl batch ls\nagentctl batch ls --json | jq -r '.batches[].id'",
			func(fs *pflag.FlagSet) runFunc {
				limit := fs.Int("limit", 20, "page size")
				cursor := fs.String("cursor", "", "next_cursor of the previous page")
				asJSON := fs.Bool("json", false, "print the page as JSON")
				return func(ctx context.Context, _ []string) error {
					page, err := e.client().ListBatches(ctx, *limit, *cursor)
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, page)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSTATUS\tTOTAL\tAGENT\tCREATED")
					for _, b := range page.Batches {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", b.ID, b.Status, b.Total, b.Agent, b.CreatedAt.Local().Format(time.DateTime))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if page.NextCursor != "" {
						fmt.Fprintf(e.stderr, "more: --cursor %s\n", page.NextCursor)
					}
					return nil
				}
			}), "list"),
		leaf("show [flags] BATCH", "Show a batch: its status and its runs' counts by status",
			"agentctl batch show bat_01JD3X\nagentctl batch show --json bat_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				asJSON := fs.Bool("json", false, "print the batch as JSON")
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("batch show takes one BATCH id")
					}
					b, err := e.client().GetBatch(ctx, pos[0])
					if err != nil {
						return err
					}
					if *asJSON {
						return writeJSON(e.stdout, b)
					}
					printBatch(e.stdout, b)
					return nil
				}
			}),
		leaf("results [flags] BATCH", "Print a batch's results as JSONL, in input order",
			"agentctl batch results --wait --out results.jsonl bat_01JD3X\nagentctl batch results --after 99 bat_01JD3X",
			func(fs *pflag.FlagSet) runFunc {
				wait := fs.Bool("wait", false, "write each line as its run ends, until the last")
				after := fs.Int("after", -1, "start after this input index (0-based)")
				out := fs.String("out", "", "write the JSONL to this file instead of stdout")
				fs.Bool("json", true, "JSONL output (the default: one JSON object a line)")
				return func(ctx context.Context, pos []string) error {
					if len(pos) != 1 {
						return usagef("batch results takes one BATCH id")
					}
					w, done, err := e.output(*out)
					if err != nil {
						return err
					}
					err = e.client().BatchResults(ctx, pos[0], *after, *wait, func(r wire.BatchResult) error { return writeJSONLine(w, r) })
					return errors.Join(err, done())
				}
			}),
		e.batchChangeCmd("cancel", "Cancel a batch: its runs not started are cancelled, running ones stop at a turn boundary",
			"agentctl batch cancel bat_01JD3X", (*client.Client).CancelBatch),
		e.batchChangeCmd("retry", "Submit a batch's failed, cancelled and max-turns inputs again, as a new batch",
			"agentctl batch retry bat_01JD3X", (*client.Client).RetryBatch),
	)
}

// batchChangeCmd is batch cancel or retry: change, then print the batch.
func (e cliEnv) batchChangeCmd(name, short, example string, change func(*client.Client, context.Context, string) (wire.Batch, error)) *cobra.Command {
	return leaf(name+" BATCH", short, example, func(fs *pflag.FlagSet) runFunc {
		return func(ctx context.Context, pos []string) error {
			if len(pos) != 1 {
				return usagef("batch %s takes one BATCH id", name)
			}
			b, err := change(e.client(), ctx, pos[0])
			if err != nil {
				return err
			}
			printBatch(e.stdout, b)
			return nil
		}
	})
}

func printBatch(w io.Writer, b wire.Batch) {
	fmt.Fprintf(w, "batch %s  %s  %d inputs  agent %s\n", b.ID, b.Status, b.Total, b.Agent)
	if b.RetryOf != "" {
		fmt.Fprintf(w, "retry of %s\n", b.RetryOf)
	}
	if len(b.Counts) > 0 {
		var parts []string
		for _, st := range []agentfleet.RunStatus{agentfleet.StatusQueued, agentfleet.StatusRunning, agentfleet.StatusWaitingBudget,
			agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren, agentfleet.StatusCompleted, agentfleet.StatusFailed,
			agentfleet.StatusMaxTurns, agentfleet.StatusCancelled} {
			if n := b.Counts[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, n))
			}
		}
		fmt.Fprintln(w, strings.Join(parts, ", "))
	}
	if b.Usage != nil {
		fmt.Fprintf(w, "usage %d prompt + %d completion tokens\n", b.Usage.PromptTokens, b.Usage.CompletionTokens)
	}
}

// output opens path for writing ("": stdout); done closes it.
func (e cliEnv) output(path string) (io.Writer, func() error, error) {
	if path == "" {
		return e.stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

func (e cliEnv) batchSubmitCmd() *cobra.Command {
	return long(leaf("submit [flags] FILE", "Submit a file of inputs (JSONL) as a batch of runs",
		`agentctl batch submit inputs.jsonl
agentctl batch submit --agent triage --max-concurrent 20 --wait --out results.jsonl inputs.jsonl
jq -c '{message: .title}' issues.json | agentctl batch submit -`,
		func(fs *pflag.FlagSet) runFunc {
			var p client.BatchSubmitParams
			fs.StringVar(&p.Agent, "agent", "", "agent of every run (default: the tenant's default agent)")
			fs.IntVar(&p.MaxConcurrent, "max-concurrent", 0, "most runs of the batch in flight at once (0: no cap)")
			fs.IntVar(&p.MaxTurns, "max-turns", 0, "turn cap of each run (0: the agent's)")
			fs.Int64Var(&p.MaxTokens, "max-tokens", 0, "token cap of each run (0: none)")
			fs.StringVar(&p.IdempotencyKey, "idempotency-key", "", "submitting again with the same key returns the first batch")
			fs.StringVar(&p.CallbackURL, "callback-url", "", "receives the batch's done event, signed with the tenant's callback secret")
			wait := fs.Bool("wait", false, "wait for every run to end, with a progress bar; exit as 'run --wait' does, the worst status deciding")
			out := fs.String("out", "", "with --wait, write the results (JSONL, input order) to this file as runs end")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("batch submit takes one FILE of inputs, JSONL (one {\"message\",...} object a line; - for stdin)")
				}
				if *out != "" && !*wait {
					return usagef("--out needs --wait (or use 'agentctl batch results --out FILE BATCH')")
				}
				return e.batchSubmit(ctx, e.client(), p, pos[0], *wait, *out)
			}
		}), `Submits FILE (- for stdin), one JSON object a line ({"message",
"custom_id", "context", "session_id", "metadata"}), as a batch and prints
its id. With --wait it follows the batch with a progress bar on a terminal
(plain lines on stderr otherwise, the results as JSONL on stdout unless
--out) and exits with the code of the worst status among its runs: 1
failed, then 4 cancelled, then 2 max turns.`)
}

func (e cliEnv) batchSubmit(ctx context.Context, c *client.Client, p client.BatchSubmitParams, file string, wait bool, out string) error {
	in := io.Reader(os.Stdin)
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	b, err := c.SubmitBatch(ctx, p, in)
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintln(e.stdout, b.ID)
		fmt.Fprintf(e.stderr, "batch %s: %d inputs admitted (agentctl batch show %s)\n", b.ID, b.Total, b.ID)
		return nil
	}
	return e.batchWait(ctx, c, b, out)
}

// batchWait follows a batch to its end: a progress bar on a terminal
// (plain lines otherwise), the results written to out as they come (to
// stdout when it is not a terminal and out is empty), and the exit code
// of the worst status among its runs.
func (e cliEnv) batchWait(ctx context.Context, c *client.Client, b wire.Batch, out string) error {
	tty := isTerminal(e.stdout)
	progress := e.stderr
	if tty {
		progress = e.stdout
	}
	fmt.Fprintf(progress, "batch %s: %d inputs\n", b.ID, b.Total)
	results := make(chan error, 1)
	rctx, stopResults := context.WithCancel(ctx)
	defer stopResults()
	if out != "" || !tty {
		w, done, err := e.output(out)
		if err != nil {
			return err
		}
		go func() {
			err := c.BatchResults(rctx, b.ID, -1, true, func(r wire.BatchResult) error { return writeJSONLine(w, r) })
			results <- errors.Join(err, done())
		}()
	} else {
		close(results)
	}
	bar := progressBar{w: progress, tty: tty, start: time.Now(), total: b.Total}
	t := time.NewTicker(batchPoll)
	defer t.Stop()
	for {
		cur, err := c.GetBatch(ctx, b.ID)
		if err != nil {
			return err
		}
		bar.show(cur.Counts, cur.Status != "running")
		if cur.Status != "running" {
			b = cur
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := <-results; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("write results of batch %s: %w", b.ID, err)
	}
	if !tty || out != "" {
		printBatch(e.stderr, b)
	} else {
		printBatch(e.stdout, b)
	}
	return batchExit(b)
}

// batchExit is `run --wait`'s exit code for the worst status among the
// batch's runs: failed (1) over cancelled (4) over max turns (2).
func batchExit(b wire.Batch) error {
	switch {
	case b.Counts[agentfleet.StatusFailed] > 0:
		return exitError{exitFailed, fmt.Errorf("batch %s: %d of %d runs failed (agentctl batch retry %s)", b.ID, b.Counts[agentfleet.StatusFailed], b.Total, b.ID)}
	case b.Counts[agentfleet.StatusCancelled] > 0:
		return exitError{exitCancelled, fmt.Errorf("batch %s: %d of %d runs cancelled", b.ID, b.Counts[agentfleet.StatusCancelled], b.Total)}
	case b.Counts[agentfleet.StatusMaxTurns] > 0:
		return exitError{exitMaxTurns, fmt.Errorf("batch %s: %d of %d runs reached their max turns", b.ID, b.Counts[agentfleet.StatusMaxTurns], b.Total)}
	}
	return nil
}

// progressBar draws a batch's progress: one line redrawn in place on a
// terminal, a plain line every few seconds (and at the end) otherwise.
type progressBar struct {
	w        io.Writer
	tty      bool
	start    time.Time
	total    int
	lastLine time.Time
}

const progressWidth = 30

func (p *progressBar) show(counts map[agentfleet.RunStatus]int, final bool) {
	ended, failed, running := 0, 0, 0
	for st, n := range counts {
		switch {
		case st.Terminal():
			ended += n
			if st != agentfleet.StatusCompleted {
				failed += n
			}
		case st != agentfleet.StatusQueued:
			running += n
		}
	}
	elapsed := time.Since(p.start)
	rate := float64(ended) / max(elapsed.Seconds(), 0.001)
	eta := "--"
	if rate > 0 && ended < p.total {
		eta = (time.Duration(float64(p.total-ended)/rate) * time.Second).Round(time.Second).String()
	} else if ended >= p.total {
		eta = "0s"
	}
	stats := fmt.Sprintf("%d/%d done, %d failed, %d running, %.1f/s, ETA %s", ended, p.total, failed, running, rate, eta)
	if !p.tty {
		if final || time.Since(p.lastLine) >= 2*time.Second {
			p.lastLine = time.Now()
			fmt.Fprintln(p.w, stats)
		}
		return
	}
	filled := 0
	if p.total > 0 {
		filled = ended * progressWidth / p.total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", progressWidth-filled)
	fmt.Fprintf(p.w, "\r\x1b[2K[%s] %s", bar, stats)
	if final {
		fmt.Fprintln(p.w)
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
