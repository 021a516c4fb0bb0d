package agentfleet

import (
	"encoding/json"
	"time"
)

// ExecRequest asks a sandbox to run one turn's script: call run(args) with
// the carried value and report what happened.
type ExecRequest struct {
	// Script is JavaScript defining function run(args).
	Script string
	// Args is the carried value (JSON) from the previous turn; empty or
	// "null" on the first turn.
	Args json.RawMessage
	// Tenant, RunID and Turn identify the execution for policy decisions
	// and logs.
	Tenant string
	RunID  string
	Turn   int
	// Primitives lists the primitives enabled for this run's agent; nil
	// means the sandbox's default set.
	Primitives []string
	// AI performs ai()/aiJSON() sub-calls. Nil disables them.
	AI AIFunc
	// Secrets are values to redact from logs and results. The sandbox
	// redacts in the caller's process; they never reach the script's.
	Secrets []string
}

// ScriptErrorKind classifies why a script failed.
type ScriptErrorKind string

const (
	ScriptException ScriptErrorKind = "exception" // the script threw
	ScriptSyntax    ScriptErrorKind = "syntax"    // the script did not compile or defines no run()
	ScriptTimeout   ScriptErrorKind = "timeout"   // CPU deadline exceeded
	ScriptMemory    ScriptErrorKind = "memory"    // memory bound exceeded
	ScriptLimit     ScriptErrorKind = "limit"     // another limit (carried size, ...)
	ScriptCancelled ScriptErrorKind = "cancelled" // the context was cancelled
	ScriptDenied    ScriptErrorKind = "denied"    // a policy denied a primitive and the script did not catch it
)

// ScriptError is a failed execution, in a form fit to show the model.
type ScriptError struct {
	Kind    ScriptErrorKind `json:"kind"`
	Message string          `json:"message"`
}

func (e *ScriptError) Error() string { return string(e.Kind) + ": " + e.Message }

// ExecResult is what one script execution produced.
type ExecResult struct {
	// Answered is true when the script called answer(); Answer then
	// holds the answered value as JSON (a string answer is a JSON string).
	Answered bool
	Answer   json.RawMessage
	// Return is run()'s return value as JSON ("null" for undefined).
	Return json.RawMessage
	// Logs is the log()/console output, already capped (head and tail
	// kept, the cut marked).
	Logs string
	// Err is set when the script failed; Return is then meaningless.
	Err *ScriptError
	// AIUsage sums the tokens of the script's ai() sub-calls.
	AIUsage Usage
	// Duration is the wall time of the execution.
	Duration time.Duration
}
