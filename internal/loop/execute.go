// Execution: the turn's script run in the sandbox and its result turned
// into carried args, an observation step, events and the run's next status.

package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
)

func (t *turn) execute(ctx context.Context, script Script, maxTurns int) (TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	t.emit(agentfleet.Event{Type: agentfleet.EventExecuteJS, Content: t.clean(script.Code)})

	args := run.Args
	if run.Turn == 0 && len(args) == 0 {
		args = run.Context
	}
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	if len(run.WaitIDs) > 0 {
		args = WithChildren(args, ChildResults(run.ID, run.WaitIDs, t.in.Children))
	}

	var exec agentfleet.ExecResult
	if script.Unterminated {
		exec.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptSyntax,
			Message: "the ```javascript block was not closed (was the reply cut off?); send the whole script again"}
	} else {
		req := agentfleet.ExecRequest{
			Script: script.Code, Args: args, Tenant: run.Tenant, RunID: run.ID, Turn: t.n,
			Primitives: t.in.Agent.Primitives, Egress: t.in.Agent.Egress, TurnTimeout: t.in.Agent.TurnTimeout.D(), AI: t.aiFunc(), Spawn: t.spawnFunc(), IsChild: t.isChild,
			Secrets: t.in.Secrets, TenantSecrets: t.in.TenantSecrets, Credentials: t.creds,
			Approve: t.in.Agent.Approve, Approval: t.in.Approval, Skills: t.in.Skills,
		}
		if len(t.in.Agent.OpenAPI) > 0 {
			req.OpenAPI, req.ToolEvent = t.in.Agent.OpenAPI, t.toolEvent
		}
		if len(t.in.Agent.MCP) > 0 {
			req.MCP, req.ToolEvent = t.in.Agent.MCP, t.toolEvent
		}
		if cfg.Journal != nil {
			t.journal = &turnJournal{t: t, pending: map[int]pendingCharge{}}
			req.Journal = t.journal
		}
		var err error
		exec, err = cfg.Sandbox.Execute(ctx, req)
		if t.journal != nil {
			if serr := t.journal.settlePending(ctx); serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			return TurnResult{}, fmt.Errorf("execute script of turn %d: %w", t.n, err)
		}
		if ctx.Err() != nil {
			// Cancelled or timed out from outside: nothing to commit.
			if t.timedOut(ctx) {
				return t.fail("run timed out at its deadline " + run.Deadline.UTC().Format(time.RFC3339)), nil
			}
			return TurnResult{}, ctx.Err()
		}
	}
	t.mu.Lock()
	t.res.Usage = t.res.Usage.Add(exec.AIUsage)
	t.res.Spawned = t.spawned
	t.mu.Unlock()
	if exec.Approval != nil {
		return TurnResult{Turn: t.n, Outcome: OutcomeApproval, Status: run.Status, Usage: t.res.Usage, Approval: exec.Approval}, nil
	}
	if exec.Wait != nil && exec.Err == nil && exec.Answered {
		exec.Answered, exec.Answer = false, nil
		exec.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptException,
			Message: "wait() and answer() in one turn: a run that answers has ended and cannot wait; return from this turn and answer in the next, from args.children"}
	}
	waiting := exec.Wait != nil && exec.Err == nil

	if exec.Logs != "" {
		t.emit(agentfleet.Event{Type: agentfleet.EventLog, Content: exec.Logs})
	}
	var carried string
	var carriedBytes int
	switch {
	case exec.Err != nil:
		t.res.Args = args
		carried = Digest(args)
		t.emit(agentfleet.Event{Type: agentfleet.EventExecuteJSResult, Content: exec.Err.Message,
			Summary: "failed (" + string(exec.Err.Kind) + ")"})
	case exec.Answered:
		t.emit(agentfleet.Event{Type: agentfleet.EventExecuteJSResult, Summary: "answered"})
	default:
		t.res.Args = exec.Return
		carried = Digest(exec.Return)
		carriedBytes = len(exec.Return)
		if withheld := int64(carriedBytes - len(carried)); withheld > 0 {
			t.res.DataBytesCarried = withheld
		}
		t.emit(agentfleet.Event{Type: agentfleet.EventExecuteJSResult, Summary: carried})
		ev := agentfleet.Event{Type: agentfleet.EventDataUpdate, Summary: fmt.Sprintf("%s (%s)", carried, byteSize(carriedBytes))}
		if carriedBytes <= EventArgsMaxBytes {
			ev.Args = exec.Return
		}
		t.emit(ev)
	}
	observation := t.clean(Observation(t.n, exec, carried, carriedBytes))
	if waiting {
		observation += fmt.Sprintf("the run now waits for %d child run(s); the next turn's args.children holds their results\n", len(exec.Wait.IDs))
	}
	t.res.Steps = append(t.res.Steps, agentfleet.Step{
		RunID: run.ID, Turn: t.n, Index: 1, Kind: agentfleet.StepObservation,
		Content: observation, CreatedAt: cfg.Now(),
	})

	if exec.Answered {
		t.emit(agentfleet.Event{Type: agentfleet.EventResponse, Content: answerText(exec.Answer)})
		return t.finish(agentfleet.StatusCompleted, exec.Answer, ""), nil
	}
	if t.n >= maxTurns {
		return t.finish(agentfleet.StatusMaxTurns, nil, fmt.Sprintf("run reached max_turns (%d) without an answer", maxTurns)), nil
	}
	t.res.Outcome = OutcomeContinue
	t.res.Status = agentfleet.StatusRunning
	if waiting {
		t.res.Status = agentfleet.StatusWaitingChildren
		t.res.WaitIDs = exec.Wait.IDs
		if exec.Wait.Timeout > 0 {
			t.res.WaitUntil = cfg.Now().Add(exec.Wait.Timeout)
		}
	}
	return t.res, nil
}

// answerText renders an answer for humans: a JSON string unquoted, any
// other value as JSON.
func answerText(answer json.RawMessage) string {
	var s string
	if json.Unmarshal(answer, &s) == nil {
		return s
	}
	return string(answer)
}
