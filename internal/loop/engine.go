// Package loop is the turn engine of agentfleet: it composes the prompt
// (protocol, persona, sandbox API, rehydrated history), calls the model,
// extracts the script, runs it in the sandbox with the carried args, and
// returns everything one turn produced — steps, new carried state, status,
// usage and events — for the caller to commit.
//
// Its unit of work is one turn (Engine.Step), and it keeps nothing between
// turns, so a stateless worker can run turn N of a run on one machine and
// turn N+1 on another. It knows no NATS, SQL, HTTP server or goja: the
// model, the sandbox, the budget meter and the reply recorder come in
// through the small interfaces declared here, which is what lets the same
// Step run in a unit test, in `agentctl dev` and on a worker.
//
// The protocol ("code as action", docs/ARCHITECTURE.md §3): the model answers with one
// fenced javascript block defining run(args); run's return value is carried
// to the next turn in full but the model only sees its structural Digest;
// answer(result) ends the run; a reply without code is the final answer;
// errors are shown to the model with args left unchanged; a script is
// elided from the history once its turn has run (a failed one stays), so
// that each prompt starts with the one before it and providers' prompt
// caches hit. A run of a session recalls its session's earlier runs
// first (prompt.go). A session run's history, or that of any run whose
// agent sets a context_window, is folded into a summary step once it
// outgrows the agent's profile (fold.go, compact.go); the step commits
// with the turn and later prompts replay it instead of what it covers.
//
// Crash rules (docs/ARCHITECTURE.md §4) the engine keeps: the budget is reserved before
// the model call (for a tenant the caller found unlimited, a hold-free
// reservation from the Meter) and settled after it; the reply is recorded
// (fenced by the turn number) before the script runs, and a turn that
// finds a recorded reply reuses it instead of paying the model again; the
// script's side-effecting calls are journaled (Config.Journal, journal.go),
// so a turn executed again replays them, an ai() call billed with its
// record, instead of making them again.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/redact"
	"github.com/agentfleet/agentfleet/internal/sandbox"
)

// Defaults of Config.
const (
	MaxTurnsDefault            = 20
	MaxCompletionTokensDefault = 2048
	AIMaxTokensDefault         = 1024
	// MaxModelCallsPerTurnDefault caps a turn's model calls, its own
	// and its script's ai() sub-calls, unless the agent sets its own.
	MaxModelCallsPerTurnDefault = 16
	// MaxChildrenDefault caps the children a run spawns over its life,
	// MaxDepthDefault how deep runs nest (a client's run is at depth 0).
	MaxChildrenDefault   = 100
	MaxDepthDefault      = 3
	HistoryWindowDefault = 30
	ContextTokensDefault = 24000
	// RecordRetryForDefault outlasts a PostgreSQL restart (2-8 s in the
	// chaos bench).
	RecordRetryForDefault = 30 * time.Second
	// EventArgsMaxBytes bounds the carried value copied into a
	// data_update event; larger values are described by their digest.
	EventArgsMaxBytes = 8 << 10
)

// Config configures an Engine. Model and Sandbox are required; a nil Meter
// means no budget, a nil Recorder means replies are not recorded (tests,
// benchmarks).
type Config struct {
	Model    Model
	Sandbox  Sandbox
	Meter    Meter
	Recorder Recorder
	// Journal, when set, journals the scripts' side-effecting calls;
	// nil runs them unjournaled (tests, benchmarks).
	Journal Journal
	// DefaultModel is used when the agent names none.
	DefaultModel string
	// MaxTurns applies when neither the run nor its agent sets one.
	MaxTurns int
	// MaxCompletionTokens caps each turn's reply unless the agent sets
	// its own, or a context_window (its profile's reserve then).
	MaxCompletionTokens int
	// AIMaxTokens caps each ai()/aiJSON() sub-call's reply.
	AIMaxTokens int
	// MaxModelCallsPerTurn caps a turn's model calls (its own and its
	// script's sub-calls) unless the agent sets its own; a sub-call
	// past it throws to the script.
	MaxModelCallsPerTurn int
	// MaxChildren and MaxDepth bound spawn(): the children of one run
	// and how deep runs nest; a spawn past them throws to the script.
	MaxChildren int
	MaxDepth    int
	// HistoryWindow is how many recent turns a caller should load
	// (see Engine.HistoryFrom).
	HistoryWindow int
	// ContextTokens is the prompt budget: the session's oldest runs,
	// then the run's oldest turns, are trimmed until the estimated
	// prompt fits. Zero means no budget. An agent that sets a
	// context_window has its profile's budget instead.
	ContextTokens int
	// SessionLogCap bounds the log characters each earlier run of a
	// session keeps in the prompt (SessionLogCapDefault when zero; an
	// agent's context_window sets its profile's log cap instead).
	SessionLogCap int
	// RecordRetryFor is how long a turn keeps trying to record a model
	// reply the store failed to take (RecordRetryForDefault when zero),
	// backing off from 50ms to 1s. The reply is paid for: failing the
	// turn at once would call the model again on its retry and leave
	// this call's tokens uncharged.
	RecordRetryFor time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.MaxTurns == 0 {
		c.MaxTurns = MaxTurnsDefault
	}
	if c.MaxCompletionTokens == 0 {
		c.MaxCompletionTokens = MaxCompletionTokensDefault
	}
	if c.AIMaxTokens == 0 {
		c.AIMaxTokens = AIMaxTokensDefault
	}
	if c.MaxModelCallsPerTurn == 0 {
		c.MaxModelCallsPerTurn = MaxModelCallsPerTurnDefault
	}
	if c.MaxChildren == 0 {
		c.MaxChildren = MaxChildrenDefault
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = MaxDepthDefault
	}
	if c.HistoryWindow == 0 {
		c.HistoryWindow = HistoryWindowDefault
	}
	if c.ContextTokens == 0 {
		c.ContextTokens = ContextTokensDefault
	}
	if c.SessionLogCap == 0 {
		c.SessionLogCap = SessionLogCapDefault
	}
	if c.RecordRetryFor == 0 {
		c.RecordRetryFor = RecordRetryForDefault
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	switch {
	case c.Model == nil:
		return errors.New("loop: Config.Model is nil: pass a model client (llm.New, or a fake in tests)")
	case c.Sandbox == nil:
		return errors.New("loop: Config.Sandbox is nil: pass a sandbox (sandbox.New)")
	case c.MaxTurns < 0 || c.MaxCompletionTokens < 0 || c.AIMaxTokens < 0 || c.MaxModelCallsPerTurn < 0 ||
		c.MaxChildren < 0 || c.MaxDepth < 0 ||
		c.HistoryWindow < 0 || c.ContextTokens < 0 || c.SessionLogCap < 0 || c.RecordRetryFor < 0:
		return errors.New("loop: limits must not be negative (zero selects the default)")
	}
	return nil
}

// Engine executes turns. It is safe for concurrent use; it holds no run
// state, only a cache of system prompts.
type Engine struct {
	cfg     Config
	prompts sync.Map // persona + "\x00" + primitives -> system prompt
	// red is the last redactor a turn built: a worker's turns pass the
	// same secrets (its provider key, a busy tenant's) turn after turn.
	red atomic.Pointer[redactorEntry]
}

type redactorEntry struct {
	values []redact.Value
	r      *redact.Redactor
}

// redactor is the redactor of a turn's secrets.
func (e *Engine) redactor(in *TurnInput) *redact.Redactor {
	if len(in.Secrets) == 0 && len(in.TenantSecrets) == 0 {
		return nil
	}
	vs := redact.Values(in.Secrets, in.TenantSecrets)
	if c := e.red.Load(); c != nil && slices.Equal(c.values, vs) {
		return c.r
	}
	c := &redactorEntry{values: vs, r: redact.New(vs)}
	e.red.Store(c)
	return c.r
}

// New returns an Engine.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg}, nil
}

// HistoryFrom is the first turn whose steps a caller should load before
// executing turn next: the history window. Older turns are summarised to
// the model as omitted.
func (e *Engine) HistoryFrom(next int) int {
	from := next - e.cfg.HistoryWindow
	if from < 1 {
		return 1
	}
	return from
}

// SystemPrompt returns the system prompt of an agent whose secrets are
// none exposed to scripts.
func (e *Engine) SystemPrompt(agent agentfleet.Agent) string { return e.systemPrompt(agent, false) }

var promptKeySep = [4]string{"\x00", "\x01", "\x02", "\x03"}

// systemPrompt is the system prompt of an agent; secret declares
// secret(), for an agent that names a secret exposed to scripts.
func (e *Engine) systemPrompt(agent agentfleet.Agent, secret bool) string {
	return e.systemPromptTools(agent, secret, "")
}

// mcpDeclarations is the prompt's lines of the agent's MCP servers, their
// tools listed at turn start (cached by the sandbox): "" for an agent
// without any.
func (t *turn) mcpDeclarations(ctx context.Context) string {
	d, ok := t.e.cfg.Sandbox.(MCPDeclarer)
	if !ok || len(t.in.Agent.MCP) == 0 {
		return ""
	}
	return d.MCPDeclarations(ctx, agentfleet.ExecRequest{Tenant: t.run.Tenant, Egress: t.in.Agent.Egress, Credentials: t.creds, MCP: t.in.Agent.MCP})
}

// systemPromptTools is systemPrompt with the declarations of the agent's
// MCP servers (mcp) after its OpenAPI modules'.
func (e *Engine) systemPromptTools(agent agentfleet.Agent, secret bool, mcp string) string {
	// nil primitives (all) and none are two prompts; so are with and
	// without secret(): the separator says which, costing nothing more
	// on a path every turn takes.
	sep := 0
	if agent.Primitives == nil {
		sep |= 1
	}
	if secret {
		sep |= 2
	}
	key := agent.Persona + promptKeySep[sep] + strings.Join(agent.Primitives, ",")
	var modules string
	if len(agent.OpenAPI) > 0 {
		// An agent without modules pays nothing here.
		modules = sandbox.OpenAPIDeclarations(agent.OpenAPI)
		key += "\x04" + modules
	}
	if mcp != "" {
		modules = strings.TrimLeft(modules+"\n"+mcp, "\n")
		key += "\x05" + mcp
	}
	if p, ok := e.prompts.Load(key); ok {
		return p.(string)
	}
	p := SystemPrompt(agent.Persona, withModules(e.cfg.Sandbox.Declarations(agent.Primitives, secret), modules), agent.Primitives == nil)
	e.prompts.Store(key, p)
	return p
}

// TurnInput is what a turn needs: the run as committed so far (Run.Turn
// turns), its agent, the recorded steps of the turns in the history
// window, oldest first, and for a run of a session, its session's earlier
// runs.
type TurnInput struct {
	Run   agentfleet.Run
	Agent agentfleet.Agent
	Steps []agentfleet.Step
	// Session is the ended runs of Run's session before it that ran a
	// turn, oldest first, with their steps, from the newest one that
	// holds a summary step (which covers all before it); nil for a run
	// without a session. The prompt recalls them before the run's own
	// turns, and without a context turn 1's args is the last one's
	// final carried value (Args).
	Session []SessionRun
	// Secrets are values redacted as "[redacted]" from everything the
	// turn records or sends (the provider key).
	Secrets []string
	// TenantSecrets are the run's tenant's secrets, opened: each value
	// is redacted as "[secret:<name>]" from everything the turn records
	// or sends, and those the agent names (AgentSpec.Secrets) are its
	// script's credentials (agentfleet.ExecRequest.Credentials). A name
	// the tenant has no secret of fails the run.
	TenantSecrets []agentfleet.OpenSecret
	// FirstAttempt says no earlier attempt of this turn can have called
	// the model (the turn's message is on its first delivery), so the
	// recorded-reply lookup is skipped. Should it be wrong, the reply
	// recorded first still wins (RecordReply returns it) and the only
	// cost is one more model call.
	FirstAttempt bool
	// TenantUnlimited says the run's tenant had no token limit and no
	// per-minute limit when the caller loaded the run (store.TurnLoad).
	// The turn's model call then reserves with Meter.ReserveUnlimited:
	// an unlimited tenant has nothing to hold, and asking would cost a
	// store round trip per turn. Should the tenant be given a limit
	// meanwhile, the charge applies to it (capped); the ai() calls of
	// the script reserve as usual.
	TenantUnlimited bool
	// Spawn, when set, starts the children the script spawns (it makes
	// spawn() available); the engine holds them to MaxChildren and
	// MaxDepth first.
	Spawn agentfleet.SpawnFunc
	// IsChild, when set, says whether an id names a child of Run that
	// an earlier turn (or an earlier attempt of this one) spawned;
	// wait() takes those and the children this turn spawns, no other.
	IsChild func(ctx context.Context, id string) (bool, error)
	// Children are the runs Run waited for (Run.WaitIDs), as they are
	// now: this turn's args gets their results.
	Children []agentfleet.Run
	// Approval looks up the approvals of the calls the agent's approve
	// rules cover; nil makes such a call throw.
	Approval agentfleet.ApprovalFunc
	// Skills is the skills the run's agent sees (nil: none). The prompt
	// lists the SkillCatalogSize most relevant to the task, and scripts
	// read them with skillList() and skillGet() (skills.go).
	Skills agentfleet.SkillLibrary
	// OnEvent, when set, sees each event the moment the turn produces
	// it (without seq: the store assigns seq on commit), for live
	// progress. The durable copy is TurnResult.Events, published after
	// the commit. It may be called from the sandbox's host-call
	// goroutine, one call at a time.
	OnEvent func(agentfleet.Event)
	// OnChunk, when set and the model is a Streamer, makes the turn's
	// model call stream: it sees each response_chunk event as the
	// reply arrives (stream.go), on the turn's goroutine, and should
	// not block. Chunks are never part of TurnResult.Events.
	OnChunk func(agentfleet.Event)
}

// Outcome says what the caller does with a TurnResult.
type Outcome int

const (
	// OutcomeContinue: commit the turn and enqueue the next one.
	OutcomeContinue Outcome = iota + 1
	// OutcomeFinished: commit the turn; the run ended (Status says how).
	OutcomeFinished
	// OutcomeNoBudget: nothing to commit; the tenant had no budget for
	// the model call (Budget says what was needed and left). The run
	// parks or fails, by the tenant's policy.
	OutcomeNoBudget
	// OutcomeApproval: nothing to commit; the script stopped at a call
	// that waits for a person's approval (Approval says which). The run
	// parks until it is decided, then the turn runs again: its recorded
	// reply, the same script, the call approved or throwing.
	OutcomeApproval
)

func (o Outcome) String() string {
	switch o {
	case OutcomeContinue:
		return "continue"
	case OutcomeFinished:
		return "finished"
	case OutcomeNoBudget:
		return "no_budget"
	case OutcomeApproval:
		return "approval"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// TurnResult is everything one turn produced, to be committed in one
// transaction (fenced by Turn) and then published.
type TurnResult struct {
	Turn    int
	Outcome Outcome
	// Status is the run's status after the turn.
	Status agentfleet.RunStatus
	Steps  []agentfleet.Step
	// Args is the carried state for the next turn.
	Args   json.RawMessage
	Answer json.RawMessage
	Error  string
	// Usage is the tokens of this turn: its model call and its
	// scripts' ai() sub-calls.
	Usage agentfleet.Usage
	// DataBytesCarried is what this turn kept out of the prompt: the
	// carried value's size net of the digest shown instead.
	DataBytesCarried int64
	// Events are the turn's events, in order, without seq (the store
	// assigns it on commit).
	Events []agentfleet.Event
	// Budget is set with OutcomeNoBudget, Approval with OutcomeApproval.
	Budget   *agentfleet.BudgetExhaustedError
	Approval *agentfleet.ApprovalCall
	// Spawned counts the children the turn's script spawned. With
	// Status waiting_children, the run waits for WaitIDs until
	// WaitUntil (zero: until they end).
	Spawned   int
	WaitIDs   []string
	WaitUntil time.Time
}

// turn is the state of one Step in progress.
type turn struct {
	e      *Engine
	in     *TurnInput
	run    *agentfleet.Run
	n      int
	res    TurnResult
	redact *redact.Redactor
	// creds are the secrets the agent names, of TenantSecrets; exposed
	// says one of them is exposed to scripts.
	creds   []agentfleet.OpenSecret
	exposed bool
	missing string // why the run cannot have its credentials
	// mu guards res.Events and what the script's ai() sub-calls count:
	// they run on the sandbox's host-call goroutine.
	mu sync.Mutex
	// calls is the turn's model calls so far, its own reply included;
	// subUsage what its sub-calls used so far; spawned the children its
	// script started.
	calls    int
	subUsage agentfleet.Usage
	spawned  int
	// spawnedIDs are the ids of the children spawned counts.
	spawnedIDs map[string]bool
	// journal is the script's journal, when the engine has one.
	journal *turnJournal
	// began is when the engine started the turn: its model_call event
	// says so (modelCallArgs), so a timeline can tell the turn's wait in
	// the queue from its model call.
	began time.Time
}

// modelCallArgs is the Args of a turn's own model_call event.
type modelCallArgs struct {
	TurnStarted time.Time `json:"turn_started"`
}

// Step executes turn Run.Turn+1 of a run. Errors are infrastructure
// failures the caller should retry later (model unavailable, store down);
// ErrStale means another worker got there first. Everything that happens
// to the script — exceptions, timeouts, limits — is in the result and
// shown to the model on the next turn.
func (e *Engine) Step(ctx context.Context, in TurnInput) (TurnResult, error) {
	if in.Run.MaxTokens == 0 {
		// The agent's cap holds for a run that sets none.
		in.Run.MaxTokens = in.Agent.MaxTokens
	}
	if in.Run.Turn == 0 && len(in.Run.Args) == 0 {
		// A session's run goes on from what its previous run carried.
		in.Run.Args = firstArgs(&in.Run, in.Session)
	}
	t := &turn{e: e, in: &in, run: &in.Run, n: in.Run.Turn + 1, began: e.cfg.Now()}
	t.res.Turn = t.n
	t.redact = e.redactor(&in)
	t.missing = t.credentials()
	return t.step(ctx)
}

// credentials picks the secrets the agent names out of the tenant's, or
// says which one the tenant lacks.
func (t *turn) credentials() (missing string) {
	agent := &t.in.Agent
	for _, name := range agent.Secrets {
		i := slices.IndexFunc(t.in.TenantSecrets, func(s agentfleet.OpenSecret) bool { return s.Name == name })
		if i < 0 {
			return fmt.Sprintf("agent %s names secret %s, which tenant %s does not have: set it (PUT /v1/secrets/%s) or remove it from the agent's secrets",
				agent.Name, name, t.run.Tenant, name)
		}
		s := t.in.TenantSecrets[i]
		t.creds = append(t.creds, s)
		t.exposed = t.exposed || s.Expose
	}
	return ""
}

func (t *turn) step(ctx context.Context) (TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	if t.n == 1 {
		t.emit(agentfleet.Event{Type: agentfleet.EventStarted, Summary: "agent " + run.Agent})
		t.emit(agentfleet.Event{Type: agentfleet.EventUser, Content: run.Message})
	}
	if t.missing != "" {
		return t.fail(t.missing), nil
	}
	if !run.Deadline.IsZero() {
		if !cfg.Now().Before(run.Deadline) {
			return t.fail("run timed out at its deadline " + run.Deadline.UTC().Format(time.RFC3339)), nil
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, run.Deadline)
		defer cancel()
	}
	if run.MaxTokens > 0 && run.Usage.Total() >= run.MaxTokens {
		return t.fail(fmt.Sprintf("run used %d tokens, reaching its max_tokens of %d", run.Usage.Total(), run.MaxTokens)), nil
	}
	maxTurns := firstPositive(run.MaxTurns, t.in.Agent.MaxTurns, cfg.MaxTurns)
	if t.n > maxTurns {
		return t.finish(agentfleet.StatusMaxTurns, nil, fmt.Sprintf("run reached max_turns (%d) without an answer", maxTurns)), nil
	}

	conv, err := t.compose(ctx)
	if err != nil {
		if t.timedOut(ctx) {
			return t.fail("run timed out at its deadline " + run.Deadline.UTC().Format(time.RFC3339)), nil
		}
		return TurnResult{}, err
	}
	if t.redact != nil {
		// Nothing of a secret reaches the model: not the task, the
		// persona, nor a step recorded before the secret was set.
		for i := range conv.messages {
			conv.messages[i].Content = t.redact.String(conv.messages[i].Content)
		}
	}
	if conv.trimmed > 0 || conv.trimmedRuns > 0 {
		t.emit(agentfleet.Event{Type: agentfleet.EventBudgetTrimmed, Summary: trimSummary(conv, conv.budget)})
	}
	res, err := t.respond(ctx, conv.messages, maxTurns)
	if err == nil && conv.summary != nil && (res.Outcome == OutcomeContinue || res.Outcome == OutcomeFinished) {
		// The checkpoint commits with the turn that made it, or not at
		// all: a turn run again replays its summary calls.
		s := *conv.summary
		s.Index = len(res.Steps)
		res.Steps = append(res.Steps, s)
	}
	return res, err
}

// respond calls the model with the turn's prompt and acts on its reply.
func (t *turn) respond(ctx context.Context, msgs []agentfleet.ChatMessage, maxTurns int) (TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	reply, stop, err := t.reply(ctx, msgs)
	if err != nil {
		if t.timedOut(ctx) {
			return t.fail("run timed out at its deadline " + run.Deadline.UTC().Format(time.RFC3339)), nil
		}
		return TurnResult{}, err
	}
	if stop != nil {
		return *stop, nil
	}
	t.res.Usage = t.res.Usage.Add(reply.Usage)
	t.calls = 1
	content := t.clean(reply.Content)
	began, _ := json.Marshal(modelCallArgs{TurnStarted: t.began.UTC()})
	t.emit(agentfleet.Event{Type: agentfleet.EventModelCall, Content: content, Summary: reply.Model, Args: began,
		Tokens: &agentfleet.Tokens{Prompt: reply.Usage.PromptTokens, Completion: reply.Usage.CompletionTokens}})
	t.res.Steps = append(t.res.Steps, agentfleet.Step{
		RunID: run.ID, Turn: t.n, Index: 0, Kind: agentfleet.StepModel,
		Content: content, Model: reply.Model, Usage: reply.Usage, CreatedAt: cfg.Now(),
	})

	script, ok := ExtractScript(reply.Content)
	if !ok {
		text := redact.Shapes(strings.TrimSpace(content))
		answer, _ := json.Marshal(text)
		t.emit(agentfleet.Event{Type: agentfleet.EventResponse, Content: text})
		return t.finish(agentfleet.StatusCompleted, answer, ""), nil
	}
	return t.execute(ctx, script, maxTurns)
}

// finish ends the run with status; answer or errMsg says how.
func (t *turn) finish(status agentfleet.RunStatus, answer json.RawMessage, errMsg string) TurnResult {
	t.res.Outcome = OutcomeFinished
	t.res.Status = status
	t.res.Answer = answer
	t.res.Error = t.clean(errMsg)
	if t.res.Args == nil {
		t.res.Args = t.run.Args
	}
	if errMsg != "" {
		t.emit(agentfleet.Event{Type: agentfleet.EventError, Content: errMsg})
	}
	t.emit(agentfleet.Event{Type: agentfleet.EventDone, Summary: string(status)})
	return t.res
}

func (t *turn) fail(msg string) TurnResult { return t.finish(agentfleet.StatusFailed, nil, msg) }

// timedOut reports whether ctx ended because the run's deadline passed.
func (t *turn) timedOut(ctx context.Context) bool {
	return !t.run.Deadline.IsZero() && errors.Is(ctx.Err(), context.DeadlineExceeded) && !t.e.cfg.Now().Before(t.run.Deadline)
}

func (t *turn) emit(ev agentfleet.Event) {
	ev.V = agentfleet.EventVersion
	ev.RunID = t.run.ID
	ev.Tenant = t.run.Tenant
	ev.SessionID = t.run.SessionID
	ev.Turn = t.n
	ev.TS = t.e.cfg.Now().UTC()
	if t.redact != nil {
		ev.Content = t.redact.String(ev.Content)
		ev.Summary = t.redact.String(ev.Summary)
		ev.Args = t.redact.JSON(ev.Args)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Events = append(t.res.Events, ev)
	if t.in.OnEvent != nil {
		t.in.OnEvent(ev)
	}
}

// clean redacts known secrets from text that goes into steps, events
// and prompts.
func (t *turn) clean(s string) string { return t.redact.String(s) }

// trimSummary says what the context budget left out of the prompt.
func trimSummary(conv conversation, tokens int) string {
	var parts []string
	if conv.trimmedRuns > 0 {
		parts = append(parts, fmt.Sprintf("%d earlier run(s) of the session", conv.trimmedRuns))
	}
	if conv.trimmed > 0 {
		parts = append(parts, fmt.Sprintf("%d oldest turn(s)", conv.trimmed))
	}
	return fmt.Sprintf("%s left out of the prompt to fit %d tokens", strings.Join(parts, " and "), tokens)
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
