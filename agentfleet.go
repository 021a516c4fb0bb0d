// Package agentfleet holds the domain vocabulary every part of the fleet
// speaks: runs and their statuses, steps, events, tenants and budgets, the
// chat messages exchanged with a model and the request/result of one script
// execution.
//
// It owns no behaviour beyond small helpers on these types and imports
// nothing but the standard library. Infrastructure packages (bus, store,
// sandbox, llm) depend on it; it depends on none of them. This is the centre
// of the "standard package layout": domain at the middle, one package per
// dependency at the edge.
package agentfleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"
)

// RunStatus is where a run stands in its lifecycle:
//
//	queued -> running -> {completed | failed | cancelled | max_turns}
//
// with waiting states a run can enter between turns and leave again.
type RunStatus string

const (
	StatusQueued          RunStatus = "queued"
	StatusRunning         RunStatus = "running"
	StatusCompleted       RunStatus = "completed"
	StatusFailed          RunStatus = "failed"
	StatusCancelled       RunStatus = "cancelled"
	StatusMaxTurns        RunStatus = "max_turns"
	StatusWaitingBudget   RunStatus = "waiting_budget"
	StatusWaitingApproval RunStatus = "waiting_approval"
	StatusWaitingChildren RunStatus = "waiting_children"
)

// Terminal reports whether the run can never change again.
func (s RunStatus) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusMaxTurns:
		return true
	}
	return false
}

// Waiting reports whether the run is parked between turns, holding no
// worker and no message lease.
func (s RunStatus) Waiting() bool {
	switch s {
	case StatusWaitingBudget, StatusWaitingApproval, StatusWaitingChildren:
		return true
	}
	return false
}

// Valid reports whether s is one of the known statuses.
func (s RunStatus) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled,
		StatusMaxTurns, StatusWaitingBudget, StatusWaitingApproval, StatusWaitingChildren:
		return true
	}
	return false
}

// CanTransition reports whether a run may move from s to next. Terminal
// statuses are final; a status may be re-entered (running -> running
// advances the turn).
func (s RunStatus) CanTransition(next RunStatus) bool {
	if !s.Valid() || !next.Valid() || s.Terminal() {
		return false
	}
	switch s {
	case StatusQueued:
		// A queued run may start, be cancelled, park (budget), or fail
		// before its first turn (policy "fail", dead letter).
		return next != StatusMaxTurns && next != StatusWaitingApproval && next != StatusWaitingChildren
	case StatusRunning:
		return next != StatusQueued
	default: // waiting states
		return next == StatusRunning || next == StatusQueued || next.Terminal() || next == s
	}
}

// Usage counts the tokens of one or more model calls.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int64 { return u.PromptTokens + u.CompletionTokens }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + o.PromptTokens, CompletionTokens: u.CompletionTokens + o.CompletionTokens}
}

// Run is one agent working one task. Turn counts committed turns: the next
// turn to execute is Turn+1.
type Run struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	// AgentVersion is the version of the agent the run was admitted
	// under, which it uses to its end (0: a run admitted before agents
	// had versions, which uses the agent's current one).
	AgentVersion   int               `json:"agent_version,omitempty"`
	SessionID      string            `json:"session_id,omitempty"`
	Status         RunStatus         `json:"status"`
	Message        string            `json:"message"`
	Context        json.RawMessage   `json:"context,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	BatchID        string            `json:"batch_id,omitempty"`
	// ParentRunID is the run whose script spawned this one; Depth counts
	// the spawns above it (a run submitted by a client is at depth 0).
	ParentRunID string `json:"parent_run_id,omitempty"`
	Depth       int    `json:"depth,omitempty"`
	// Children counts the runs this run's scripts spawned.
	Children int `json:"children,omitempty"`
	// WaitIDs are the children the run waits for (waiting_children), or
	// waited for, until its next turn commits; WaitUntil ends the wait
	// early (zero: no timeout).
	WaitIDs   []string  `json:"wait_ids,omitempty"`
	WaitUntil time.Time `json:"wait_until,omitzero"`
	MaxTurns  int       `json:"max_turns,omitempty"`
	MaxTokens int64     `json:"max_tokens,omitempty"`
	// Deadline is when the run times out; zero means no run timeout.
	Deadline time.Time `json:"deadline,omitzero"`
	Turn     int       `json:"turns"`
	// Args is the carried state: the JSON value the last script returned,
	// handed in full to the next turn's run(args). Never in a prompt.
	Args   json.RawMessage `json:"-"`
	Answer json.RawMessage `json:"answer,omitempty"`
	Error  string          `json:"error,omitempty"`
	Usage  Usage           `json:"usage"`
	// DataBytesCarried sums, over turns, the carried bytes withheld from
	// prompts net of the digest shown instead.
	DataBytesCarried int64 `json:"data_bytes_carried"`
	// EventSeq is the seq of the last event appended for the run.
	EventSeq int64 `json:"-"`
	// CancelRequested is set when a cancel arrived while a turn may be
	// executing; the run stops at the next turn boundary.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Wake counts how often the run was parked and resumed; it makes the
	// message id of a resumed turn distinct from the parked one, which the
	// queue's dedup window would otherwise drop.
	Wake      int       `json:"-"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// StepKind says what a step of the trace records.
type StepKind string

const (
	// StepUser is the task as the user gave it (turn 0).
	StepUser StepKind = "user"
	// StepModel is the model's reply of a turn, verbatim.
	StepModel StepKind = "model"
	// StepObservation is what the model is shown about the turn's
	// execution: its log output, the digest of the returned value, or
	// the error.
	StepObservation StepKind = "observation"
	// StepSummary is a checkpoint: the compactor's summary of the
	// session's history up to and including the turn it names in its
	// Content's header line ("[summary of the session through turn T]",
	// T a turn of the step's own run, 0 for its message alone: it covers
	// the session's earlier runs too; the summary follows it:
	// loop.RenderSummary, loop.ParseSummary). Later turns and runs of
	// the session replay it instead of the steps it covers; those stay
	// in the trace.
	StepSummary StepKind = "summary"
)

// Step is one entry of a run's trace. The trace is what a later turn
// rehydrates its history from.
type Step struct {
	RunID     string    `json:"run_id"`
	Turn      int       `json:"turn"`
	Index     int       `json:"index"`
	Kind      StepKind  `json:"kind"`
	Content   string    `json:"content"`
	Model     string    `json:"model,omitempty"`
	Usage     Usage     `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
}

// EventType names a RunEvent.
type EventType string

const (
	EventQueued            EventType = "queued"
	EventStarted           EventType = "started"
	EventUser              EventType = "user"
	EventModelCall         EventType = "model_call"
	EventExecuteJS         EventType = "execute_js"
	EventExecuteJSResult   EventType = "execute_js_result"
	EventLog               EventType = "log"
	EventDataUpdate        EventType = "data_update"
	EventResponse          EventType = "response"
	EventResponseChunk     EventType = "response_chunk"
	EventWarning           EventType = "warning"
	EventError             EventType = "error"
	EventBudgetWaiting     EventType = "budget_waiting"
	EventApprovalRequested EventType = "approval_requested"
	EventApproved          EventType = "approved"
	EventDenied            EventType = "denied"
	EventChildSpawned      EventType = "child_spawned"
	EventCompacted         EventType = "compacted"
	EventBudgetTrimmed     EventType = "budget_trimmed"
	EventToolCall          EventType = "tool_call"
	EventToolResult        EventType = "tool_result"
	EventCancelled         EventType = "cancelled"
	EventDone              EventType = "done"
)

// EventVersion is the schema version written in every event's "v".
const EventVersion = 1

// Tokens is the token usage attached to an event.
type Tokens struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
}

// Event is a RunEvent: one observable step of a run. Seq is dense per run
// (1, 2, 3, ...) so a consumer can detect gaps and dedupe.
//
// A response_chunk event is the exception: a piece of a streamed model
// reply, published on core NATS (af.stream.<tenant>.<run>) and
// interleaved into SSE, never stored. It has Seq 0, Index (the chunk's
// place in its turn's reply, from 1) and Text; the turn's chunks
// concatenated are the reply the turn records.
type Event struct {
	V         int             `json:"v"`
	RunID     string          `json:"run_id"`
	Tenant    string          `json:"tenant"`
	SessionID string          `json:"session_id,omitempty"`
	Seq       int64           `json:"seq"`
	Turn      int             `json:"turn"`
	Type      EventType       `json:"type"`
	TS        time.Time       `json:"ts"`
	Content   string          `json:"content,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	Tokens    *Tokens         `json:"tokens,omitempty"`
	Summary   string          `json:"summary,omitempty"`
	Index     int             `json:"index,omitempty"`
	Text      string          `json:"text,omitempty"`
}

// Terminal reports whether the event is the last one of a run: every run
// ends with a done event, whatever its final status.
func (e Event) Terminal() bool { return e.Type == EventDone }

// BudgetWindow is the accounting window of a tenant's token limit.
type BudgetWindow string

// Window kinds. A rolling window is written as a Go duration ("24h", "1h");
// it is tumbling: it starts at first use and restarts when it ends.
const (
	WindowDay   BudgetWindow = "day"   // calendar day, UTC
	WindowMonth BudgetWindow = "month" // calendar month, UTC
)

// ExhaustedPolicy is what happens to a run whose tenant has no budget left.
type ExhaustedPolicy string

const (
	// ExhaustedQueue parks the run in waiting_budget until budget returns.
	ExhaustedQueue ExhaustedPolicy = "queue"
	// ExhaustedFail ends the run as failed with a budget error.
	ExhaustedFail ExhaustedPolicy = "fail"
)

// Tenant is one customer of the fleet. A zero TokenLimit means unlimited.
type Tenant struct {
	ID                string       `json:"id"`
	TokenLimit        int64        `json:"-"`
	Window            BudgetWindow `json:"-"`
	TokensPerMinute   int64        `json:"tokens_per_minute,omitempty"`
	MaxConcurrentRuns int          `json:"max_concurrent_runs,omitempty"`
	// MaxQueuedRuns caps the tenant's runs not yet finished (queued,
	// running or waiting); a submission beyond it is refused.
	MaxQueuedRuns int             `json:"max_queued_runs"`
	Weight        int             `json:"weight"`
	Exhausted     ExhaustedPolicy `json:"exhausted"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

// Agent is a profile a run executes under, as one version of it: a
// tenant's agent is replaced whole (PUT /v1/agents/{name}) and each
// replacement is a new Version, which a run admitted under it keeps to its
// end. Every tenant has one named "default".
type Agent struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Version int    `json:"version"`
	AgentSpec
	// CreatedAt is when the agent was first defined, UpdatedAt when this
	// version was.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AgentSpec is what a tenant defines of an agent. It is stored as one
// JSON document per version, so a new field is one line here (and its
// validation). Zero fields take the fleet's defaults.
type AgentSpec struct {
	// Persona is the agent's system text ("system" on the wire), placed
	// after the turn protocol and before the sandbox API in the prompt.
	Persona string `json:"system,omitempty"`
	// Model overrides the worker's default model.
	Model string `json:"model,omitempty"`
	// Primitives allow-lists the sandbox primitives its scripts may call
	// (the prompt declares only those); nil means all, empty none but
	// the turn protocol's own (log, answer, ...).
	Primitives []string `json:"primitives"`
	// MaxTurns and MaxTokens apply to a run that sets none of its own.
	MaxTurns  int   `json:"max_turns,omitempty"`
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxCompletionTokens caps each turn's reply.
	MaxCompletionTokens int `json:"max_completion_tokens,omitempty"`
	// MaxModelCallsPerTurn caps a turn's model calls, its own and its
	// script's ai() sub-calls.
	MaxModelCallsPerTurn int `json:"max_model_calls_per_turn,omitempty"`
	// TurnTimeout bounds one turn's script in wall time, host calls
	// included; it can only shorten the worker's limit.
	TurnTimeout Duration `json:"turn_timeout,omitempty"`
	// Egress names hosts, IP addresses and CIDRs its scripts may reach
	// past the private-address block.
	Egress []string `json:"egress,omitempty"`
	// Approve lists the primitive calls that need a person's yes
	// ("http.post", "fetch:POST", "spawn", "*"); ApprovalTimeout is how
	// long such a request waits (default ApprovalTimeoutDefault), and
	// ApprovalCallbackURL is told of each.
	Approve             []string `json:"approve,omitempty"`
	ApprovalTimeout     Duration `json:"approval_timeout,omitempty"`
	ApprovalCallbackURL string   `json:"approval_callback_url,omitempty"`
	// Secrets names the tenant's secrets its runs may use: sent by the
	// worker in their header on HTTPS requests to their hosts, and read
	// with secret(name) when exposed (CheckAgentSecrets).
	Secrets []string `json:"secrets,omitempty"`
	// ContextWindow is the model's served window in tokens; it derives
	// the prompt's history budget, compaction trigger and keep, log cap
	// and completion reserve (Profile). SummaryModel is the model the
	// compactor summarizes with (default Model).
	ContextWindow int    `json:"context_window,omitempty"`
	SummaryModel  string `json:"summary_model,omitempty"`
	// MCP names the MCP servers whose tools its scripts call with
	// require('mcp:<name>'); OpenAPI the documents whose operations they
	// call with require('api:<name>') (docs/api.md, "Tools").
	MCP     []MCPServer     `json:"mcp,omitempty"`
	OpenAPI []OpenAPIModule `json:"openapi,omitempty"`
	// Learn has the worker compile each completed run of the agent into
	// a skill of its tenant (DESIGN.md section 20): a near-duplicate of
	// an existing skill updates that one instead of adding another.
	Learn bool `json:"learn,omitempty"`
}

// MCPServer is an MCP server an agent's scripts may call, over streamable
// HTTP: Tools, when set, allow-lists its tools; Secret names the tenant's
// secret sent to it (as to any of the secret's hosts).
type MCPServer struct {
	Name   string   `json:"name"`
	URL    string   `json:"url"`
	Secret string   `json:"secret,omitempty"`
	Tools  []string `json:"tools,omitempty"`
}

// OpenAPIModule is an OpenAPI 3 document whose operations an agent's
// scripts may call: the document given inline (Spec: a JSON object, or a
// string of JSON or YAML) or fetched from SpecURL at apply time; BaseURL
// overrides its servers; Secret names the tenant's secret sent with its
// requests.
type OpenAPIModule struct {
	Name    string          `json:"name"`
	SpecURL string          `json:"spec_url,omitempty"`
	Spec    json.RawMessage `json:"spec,omitempty"`
	BaseURL string          `json:"base_url,omitempty"`
	Secret  string          `json:"secret,omitempty"`
}

// Bounds of AgentSpec.Secrets.
const (
	AgentSecretsMax   = 32
	SecretNameMaxLen  = 64
	secretNameAllowed = "a-z, 0-9 and _"
)

// ValidSecretName says whether name is a secret's name: 1 to 64 of
// a-z, 0-9 and _.
func ValidSecretName(name string) bool {
	if name == "" || len(name) > SecretNameMaxLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// CheckAgentSecrets refuses an agent's secrets list that names no
// secrets: more than AgentSecretsMax entries, a name that is not one
// (ValidSecretName), or a name listed twice.
func CheckAgentSecrets(names []string) error {
	if len(names) > AgentSecretsMax {
		return fmt.Errorf("secrets: %d names; an agent may use at most %d", len(names), AgentSecretsMax)
	}
	for i, n := range names {
		if !ValidSecretName(n) {
			return fmt.Errorf("secrets: %q is not a secret name (1 to %d of %s)", n, SecretNameMaxLen, secretNameAllowed)
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("secrets: %q is listed twice", n)
		}
	}
	return nil
}

// ApprovalTimeoutDefault is an agent's approval_timeout when it sets none.
const ApprovalTimeoutDefault = Duration(24 * time.Hour)

// Duration is a time.Duration written in JSON as a Go duration string
// ("90s", "24h0m0s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string. What is not one is a
// *json.UnmarshalTypeError, which encoding/json completes with the
// field's name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(s), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(v)
	return nil
}

// DefaultAgent is the name of the agent every tenant has.
const DefaultAgent = "default"
