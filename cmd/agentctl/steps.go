package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/client"
)

// runsStepsCmd prints a run's trace: its steps, then its journal (the
// side-effecting calls its scripts made and what each returned).
func (e cliEnv) runsStepsCmd() *cobra.Command {
	return leaf("steps [flags] RUN", "Show a run's trace: its steps, then the calls its scripts made",
		"agentctl runs steps run_01JD3X\nagentctl runs steps --turn 2 --json run_01JD3X",
		func(fs *pflag.FlagSet) runFunc {
			turn := fs.Int("turn", -1, "show this turn only (0: the run's message; -1: all)")
			asJSON := fs.Bool("json", false, "JSON output")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("runs steps takes one RUN id")
				}
				return e.runSteps(ctx, e.client(), pos[0], *turn, *asJSON)
			}
		})
}

func (e cliEnv) runSteps(ctx context.Context, c *client.Client, runID string, turn int, asJSON bool) error {
	trace, err := c.RunSteps(ctx, runID, turn)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, trace)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tSTEP\tKIND\tTOKENS\tCONTENT")
	for _, st := range trace.Steps {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\n", st.Turn, st.Index, st.Kind, st.Usage.Total(), oneLine(st.Content, 80))
	}
	if len(trace.Journal) > 0 {
		fmt.Fprintln(tw, "\nTURN\tCALL\tPRIMITIVE\tTOKENS\tREQUEST -> OUTCOME")
		for _, j := range trace.Journal {
			outcome := "ok " + oneLine(string(j.Result), 60)
			if j.Error != "" {
				outcome = "error: " + oneLine(j.Error, 60)
			}
			req := strings.TrimSpace(j.Method + " " + j.URL)
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s -> %s\n", j.Turn, j.Index, j.Primitive, j.Usage.Total(), req, outcome)
		}
	}
	return tw.Flush()
}

// oneLine is s on one line, cut to about max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
