package agentfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
	// Egress names hosts, IP addresses and CIDRs the run's fetch and
	// http may reach past the private-address block (its agent's
	// egress), on top of what the sandbox's own configuration allows.
	Egress []string
	// TurnTimeout, when positive, shortens the sandbox's wall-clock
	// limit of the turn (its agent's turn_timeout); it cannot lengthen it.
	TurnTimeout time.Duration
	// AI performs ai()/aiJSON() sub-calls. Nil disables them.
	AI AIFunc
	// Spawn starts a child run and returns its id. Nil disables spawn().
	Spawn SpawnFunc
	// IsChild says whether id names a child of this run: wait() takes
	// only those, and throws for any other id. Nil: no id is one.
	IsChild func(ctx context.Context, id string) (bool, error)
	// Secrets are values to redact from logs and results as
	// "[redacted]" (the provider key). The sandbox redacts in the
	// caller's process; they never reach the script's.
	Secrets []string
	// TenantSecrets are the run's tenant's secrets, opened: each value
	// is redacted as "[secret:<name>]" from everything the turn reports
	// (and from fetch responses before the script sees them).
	TenantSecrets []OpenSecret
	// Credentials are the secrets the run's agent names (of
	// TenantSecrets). The sandbox's parent sends each in its header on
	// the HTTPS requests of fetch and http to its hosts, after policy
	// and approvals; secret(name) returns an exposed one's value. No
	// other value reaches the script's process.
	Credentials []OpenSecret
	// Journal, when set, records the script's side-effecting calls and
	// replays those an earlier attempt of the turn recorded; the HTTP
	// ones carry an Idempotency-Key (JournalEntry.IdempotencyKey).
	Journal Journal

	// Approve is the agent's approve rules: a host call matching one
	// needs a person's yes, which Approval looks up. A match with a nil
	// Approval throws a PolicyError.
	Approve  []string
	Approval ApprovalFunc

	// OpenAPI is the agent's OpenAPI modules (require('api:<name>')):
	// each call is an HTTP request on fetch's path (egress, policy,
	// approvals, journal, credentials). ToolEvent, when set, is told
	// of each call (EventToolCall) and its outcome (EventToolResult),
	// redacted; the caller stamps, cuts and publishes them.
	OpenAPI   []OpenAPIModule
	ToolEvent func(Event)
	// MCP is the agent's MCP servers (require('mcp:<name>')): each tool
	// call goes through the policy, approvals, the journal (tools
	// without readOnlyHint) and ToolEvent, over the agent's egress.
	MCP []MCPServer
	// Skills serves skillList() and skillGet() (the skills the run's
	// agent sees); nil leaves them undefined.
	Skills SkillLibrary
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
	// Wait is set when the script called wait(): the run waits for
	// these children once the turn is committed.
	Wait *WaitRequest
	// Approval is set when the script was stopped at a call that waits
	// for a person's approval: the turn is not over and nothing of it
	// is to be committed; Return, Answer and Err are empty.
	Approval *ApprovalCall
	// Duration is the wall time of the execution.
	Duration time.Duration
}

// SpawnRequest is a script's spawn(opts): a child run of the run the
// script belongs to, of the same tenant. Empty fields take the parent's
// agent and the fleet's defaults; a child never inherits its parent's
// session.
type SpawnRequest struct {
	Agent     string            `json:"agent,omitempty"`
	Message   string            `json:"message"`
	Context   json.RawMessage   `json:"context,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	MaxTurns  int               `json:"max_turns,omitempty"`
	MaxTokens int64             `json:"max_tokens,omitempty"`
}

// SpawnFunc starts a child run for a script's spawn(); index is the
// call's journal index (JournalEntry.Index), counted the same way when the
// turn has no journal. An error is thrown to the script.
type SpawnFunc func(ctx context.Context, index int, req SpawnRequest) (id string, err error)

// WaitRequest is a script's wait(ids, {timeout}).
type WaitRequest struct {
	IDs []string `json:"ids"`
	// Timeout ends the wait with the unfinished children reported as
	// running; zero waits until every one has ended.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// ChildResult is what a parent's next turn gets for each child it
// waited for, in its args' "children", in the order of the wait's ids.
type ChildResult struct {
	ID     string          `json:"id"`
	Status RunStatus       `json:"status"`
	Answer json.RawMessage `json:"answer,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Truncated says Answer was cut at ChildAnswerMaxBytes (the whole
	// answer is the child run's).
	Truncated bool `json:"truncated,omitempty"`
}

// ChildAnswerMaxBytes bounds a child's answer in its parent's args.
const ChildAnswerMaxBytes = 64 << 10

// JournalEntry is one side-effecting call of a script (fetch or http with
// a method other than GET and HEAD, ai, aiJSON, spawn), recorded under
// (run, turn, index) with what it returned before the script saw it, so
// that a turn executed again replays it instead of making it again.
type JournalEntry struct {
	RunID string `json:"run_id"`
	Turn  int    `json:"turn"`
	// Index counts the turn's journaled calls from 0, in call order.
	Index     int    `json:"index"`
	Primitive string `json:"primitive"`
	// Method and URL are the request's (fetch and http).
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	// Result is what the call returned to the script (JSON); Error,
	// when set, is the message thrown to it instead.
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Usage is an ai() call's tokens (charged once, when recorded).
	Usage     Usage     `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
}

// IdempotencyKey is the Idempotency-Key header of a journaled HTTP call:
// the same on every attempt of its turn, so a receiver can drop a repeat.
func (e JournalEntry) IdempotencyKey() string {
	return e.RunID + "/" + strconv.Itoa(e.Turn) + "/" + strconv.Itoa(e.Index)
}

// Journal records a turn's side-effecting calls for ExecRequest.Journal.
// The sandbox numbers the calls and fills Index, Primitive, Method and URL.
type Journal interface {
	// Replay returns the entry an earlier attempt of the turn recorded
	// for call.Index, if any. An entry of another call (the script does
	// not call in the same order) is a *JournalMismatchError.
	Replay(ctx context.Context, call JournalEntry) (JournalEntry, bool, error)
	// Record records call's outcome (Result or Error). The script sees
	// the outcome only when Record returned nil; an error means it could
	// not be recorded and the turn must not go on.
	Record(ctx context.Context, call JournalEntry) error
}

// JournalMismatchError is a turn executed again that makes another call
// at an index than the one recorded there.
type JournalMismatchError struct {
	Recorded, Call JournalEntry
}

func (e *JournalMismatchError) Error() string {
	return fmt.Sprintf("the script is not deterministic: on this turn's earlier attempt its side-effecting call #%d was %s, now it is %s; "+
		"recorded calls are replayed in order, so make the same fetch/http/ai/spawn calls in the same order on every attempt (no Date.now() or Math.random() deciding them)",
		e.Call.Index, describeCall(e.Recorded), describeCall(e.Call))
}

func describeCall(e JournalEntry) string {
	if e.Method == "" && e.URL == "" {
		return e.Primitive + "()"
	}
	return e.Primitive + " " + e.Method + " " + e.URL
}

// ApprovalCall is a host call that needs a person's approval, as the
// approval shows it: Index counts the turn's host calls from 0, so the
// same (deterministic) script makes the same call at the same index when
// the turn runs again. Method is upper-case and URL canonical (fetch,
// http). Preview is the start of the call's body (fetch, http), prompt
// (ai) or message (spawn), cut and redacted.
//
// Digest binds the approval to the exact call: the hex SHA-256 of its
// method, canonical URL, body and the headers the script set (fetch,
// http), or of what it asks (ai, aiJSON, spawn). An approval of a call
// at the same index with another digest is not this call's approval.
type ApprovalCall struct {
	Index     int    `json:"call_index"`
	Primitive string `json:"primitive"`
	Method    string `json:"method,omitempty"`
	URL       string `json:"url,omitempty"`
	Preview   string `json:"preview,omitempty"`
	Digest    string `json:"request_digest,omitempty"`
}

// ApprovalState is where a call's approval stands.
type ApprovalState string

const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved"
	ApprovalDenied   ApprovalState = "denied"
)

// ApprovalFunc says where the approval of a call stands: approved (the
// call proceeds), denied (the call throws, with reason), or pending (none
// asked yet, or not decided: the turn ends waiting for it). The approval
// is of that exact call (its Index and Digest), or a grant covering it.
type ApprovalFunc func(ctx context.Context, call ApprovalCall) (state ApprovalState, reason string, err error)
