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
// errors are shown to the model with args left unchanged; only the latest
// script stays verbatim in the history.
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
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
)

// Model is the chat model a turn calls.
type Model interface {
	Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error)
}

// Sandbox runs one turn's script in isolation.
type Sandbox interface {
	Execute(ctx context.Context, req agentfleet.ExecRequest) (agentfleet.ExecResult, error)
	// Declarations documents the given primitives (nil: the default
	// set) as TypeScript declarations for the system prompt.
	Declarations(primitives []string) string
}

// Meter holds tenants' token budgets. Reserve refuses with a
// *agentfleet.BudgetExhaustedError when the tenant has no budget left.
// ReserveUnlimited is Reserve for a tenant the caller already knows to be
// unlimited: it holds nothing and asks no one, and its reservation settles
// like any other.
type Meter interface {
	Reserve(ctx context.Context, tenant, runID string, tokens int64) (agentfleet.Reservation, error)
	ReserveUnlimited(tenant, runID string, tokens int64) agentfleet.Reservation
	Settle(ctx context.Context, res agentfleet.Reservation, usage agentfleet.Usage, model string) error
	Release(ctx context.Context, res agentfleet.Reservation) error
}

// Reply is a turn's recorded model output.
type Reply struct {
	RunID         string
	Turn          int
	Content       string
	Model         string
	Usage         agentfleet.Usage
	UsageReported bool
}

// Recorder records model replies before their scripts run.
type Recorder interface {
	// RecordedReply returns the reply recorded for a turn, if any.
	RecordedReply(ctx context.Context, runID string, turn int) (Reply, bool, error)
	// RecordReply records a reply. When the turn already has one, that
	// one is returned with existed set. It fails with ErrStale when the
	// run has moved past the turn or ended. When charge is set, the
	// reply's usage settles that reservation in the same write, and
	// charged says it did; otherwise the caller settles it.
	RecordReply(ctx context.Context, r Reply, charge *agentfleet.Reservation) (rec Reply, existed, charged bool, err error)
}

// Journal keeps the side-effect journal (docs/ARCHITECTURE.md §4): each
// side-effecting call of a script, recorded with its outcome before the
// script sees it.
type Journal interface {
	// JournalList returns the entries recorded for a turn, by index.
	JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error)
	// JournalRecord records an entry; one recorded already stays, and
	// existed says so. It fails with ErrStale when the run has moved
	// past the turn or ended. When charge is set, the entry's usage (of
	// model) settles that reservation in the same write, and charged
	// says it did.
	JournalRecord(ctx context.Context, e agentfleet.JournalEntry, charge *agentfleet.Reservation, model string) (existed, charged bool, err error)
}

// ErrStale means the turn was already committed (or the run ended) by
// someone else: the caller should not commit, only re-publish what the
// commit owed.
var ErrStale = errors.New("turn already committed or run ended")

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
	// its own.
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
	// ContextTokens is the prompt budget: the oldest turns are trimmed
	// until the estimated prompt fits. Zero means no budget.
	ContextTokens int
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
		c.HistoryWindow < 0 || c.ContextTokens < 0 || c.RecordRetryFor < 0:
		return errors.New("loop: limits must not be negative (zero selects the default)")
	}
	return nil
}

// Engine executes turns. It is safe for concurrent use; it holds no run
// state, only a cache of system prompts.
type Engine struct {
	cfg     Config
	prompts sync.Map // persona + "\x00" + primitives -> system prompt
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

// SystemPrompt returns the system prompt of an agent.
func (e *Engine) SystemPrompt(agent agentfleet.Agent) string {
	key := agent.Persona + "\x00" + strings.Join(agent.Primitives, ",")
	if p, ok := e.prompts.Load(key); ok {
		return p.(string)
	}
	p := SystemPrompt(agent.Persona, e.cfg.Sandbox.Declarations(agent.Primitives))
	e.prompts.Store(key, p)
	return p
}

// TurnInput is what a turn needs: the run as committed so far (Run.Turn
// turns), its agent, and the recorded steps of the turns in the history
// window, oldest first.
type TurnInput struct {
	Run     agentfleet.Run
	Agent   agentfleet.Agent
	Steps   []agentfleet.Step
	Secrets []string
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
	// OnEvent, when set, sees each event the moment the turn produces
	// it (without seq: the store assigns seq on commit), for live
	// progress. The durable copy is TurnResult.Events, published after
	// the commit. It may be called from the sandbox's host-call
	// goroutine, one call at a time.
	OnEvent func(agentfleet.Event)
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
	redact *strings.Replacer
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
	t := &turn{e: e, in: &in, run: &in.Run, n: in.Run.Turn + 1}
	t.res.Turn = t.n
	if len(in.Secrets) > 0 {
		pairs := make([]string, 0, 2*len(in.Secrets))
		for _, s := range in.Secrets {
			if s != "" {
				pairs = append(pairs, s, "[redacted]")
			}
		}
		t.redact = strings.NewReplacer(pairs...)
	}
	return t.step(ctx)
}

func (t *turn) step(ctx context.Context) (TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	if t.n == 1 {
		t.emit(agentfleet.Event{Type: agentfleet.EventStarted, Summary: "agent " + run.Agent})
		t.emit(agentfleet.Event{Type: agentfleet.EventUser, Content: run.Message})
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

	conv := composeConversation(t.e.SystemPrompt(t.in.Agent), run, t.in.Steps, cfg.ContextTokens)
	if conv.trimmed > 0 {
		t.emit(agentfleet.Event{Type: agentfleet.EventCompacted,
			Summary: fmt.Sprintf("%d oldest turn(s) left out of the prompt to fit %d tokens", conv.trimmed, cfg.ContextTokens)})
	}
	reply, stop, err := t.reply(ctx, conv.messages)
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
	t.emit(agentfleet.Event{Type: agentfleet.EventModelCall, Content: content, Summary: reply.Model,
		Tokens: &agentfleet.Tokens{Prompt: reply.Usage.PromptTokens, Completion: reply.Usage.CompletionTokens}})
	t.res.Steps = append(t.res.Steps, agentfleet.Step{
		RunID: run.ID, Turn: t.n, Index: 0, Kind: agentfleet.StepModel,
		Content: content, Model: reply.Model, Usage: reply.Usage, CreatedAt: cfg.Now(),
	})

	script, ok := ExtractScript(reply.Content)
	if !ok {
		answer, _ := json.Marshal(strings.TrimSpace(content))
		t.emit(agentfleet.Event{Type: agentfleet.EventResponse, Content: strings.TrimSpace(content)})
		return t.finish(agentfleet.StatusCompleted, answer, ""), nil
	}
	return t.execute(ctx, script, maxTurns)
}

// reply returns the turn's model reply: the recorded one when an earlier
// attempt of this turn got that far, otherwise a fresh, metered call that
// is recorded before anything executes. stop is set when the turn ends
// without a reply (no budget, run over its token cap).
func (t *turn) reply(ctx context.Context, msgs []agentfleet.ChatMessage) (Reply, *TurnResult, error) {
	run, cfg := t.run, &t.e.cfg
	if rec := cfg.Recorder; rec != nil && !t.in.FirstAttempt {
		r, ok, err := rec.RecordedReply(ctx, run.ID, t.n)
		if err != nil {
			return Reply{}, nil, fmt.Errorf("load recorded reply of turn %d: %w", t.n, err)
		}
		if ok {
			return r, nil, nil
		}
	}
	maxCompletion := int64(firstPositive(t.in.Agent.MaxCompletionTokens, cfg.MaxCompletionTokens))
	prompt := agentfleet.EstimateTokens(msgs)
	if run.MaxTokens > 0 {
		left := run.MaxTokens - run.Usage.Total() - prompt
		if left < 1 {
			r := t.fail(fmt.Sprintf("run's max_tokens (%d) leaves no room for the next call: %d used, prompt about %d",
				run.MaxTokens, run.Usage.Total(), prompt))
			return Reply{}, &r, nil
		}
		maxCompletion = min(maxCompletion, left)
	}
	modelName := firstNonEmpty(t.in.Agent.Model, cfg.DefaultModel)
	req := agentfleet.ModelRequest{Model: modelName, Messages: msgs, MaxTokens: int(maxCompletion)}
	var res *agentfleet.Reservation
	var err error
	if t.in.TenantUnlimited && cfg.Meter != nil {
		r := cfg.Meter.ReserveUnlimited(run.Tenant, run.ID, prompt+maxCompletion)
		res = &r
	} else {
		res, err = t.e.reserve(ctx, run, prompt+maxCompletion)
	}
	var be *agentfleet.BudgetExhaustedError
	if errors.As(err, &be) {
		r := TurnResult{Turn: t.n, Outcome: OutcomeNoBudget, Status: run.Status, Budget: be}
		return Reply{}, &r, nil
	}
	if err != nil {
		return Reply{}, nil, err
	}
	resp, err := t.e.call(ctx, run, req, res)
	var unavailable *agentfleet.ModelUnavailableError
	if errors.As(err, &unavailable) {
		r := t.fail(fmt.Sprintf("agent %s: %v", t.in.Agent.Name, unavailable))
		return Reply{}, &r, nil
	}
	if err != nil {
		return Reply{}, nil, err
	}
	r := Reply{RunID: run.ID, Turn: t.n, Content: resp.Content, Model: resp.Model, Usage: resp.Usage, UsageReported: resp.UsageReported}
	if cfg.Recorder == nil {
		return r, nil, t.e.settle(ctx, run, res, resp)
	}
	got, charged, err := t.e.record(ctx, r, res)
	if !charged {
		// The reply was not recorded by this call (another attempt
		// got there first, or the turn is stale), or the charge did
		// not go with it: the tokens were spent all the same.
		if serr := t.e.settle(ctx, run, res, resp); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return Reply{}, nil, fmt.Errorf("record reply of turn %d: %w", t.n, err)
	}
	// Another attempt may have recorded first; its reply is the one this
	// turn executes, so every attempt runs the same code.
	return got, nil, nil
}

// record records a reply the model gave, and charges res with it, trying
// again while the store fails (retryRecord).
func (e *Engine) record(ctx context.Context, r Reply, res *agentfleet.Reservation) (got Reply, charged bool, err error) {
	err = e.retryRecord(ctx, func() error {
		var err error
		got, _, charged, err = e.cfg.Recorder.RecordReply(ctx, r, res)
		return err
	})
	return got, charged, err
}

// retryRecord calls write until it succeeds, for up to RecordRetryFor or
// until ctx ends, backing off from 50ms to 1s. ErrStale ends it at once:
// the turn is someone else's now.
func (e *Engine) retryRecord(ctx context.Context, write func() error) error {
	const firstDelay, maxDelay = 50 * time.Millisecond, time.Second
	// Real time, as the waits below are: Config.Now stamps what a turn
	// records and may be a test's frozen clock.
	giveUp := time.Now().Add(e.cfg.RecordRetryFor)
	for delay, tries := firstDelay, 1; ; delay, tries = min(2*delay, maxDelay), tries+1 {
		err := write()
		if err == nil || errors.Is(err, ErrStale) {
			return err
		}
		if ctx.Err() != nil || time.Now().Add(delay).After(giveUp) {
			return fmt.Errorf("%w (%d tries)", err, tries)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%d tries)", err, tries)
		case <-time.After(delay):
		}
	}
}

// reserve holds budget for one model call; nil without a Meter.
func (e *Engine) reserve(ctx context.Context, run *agentfleet.Run, tokens int64) (*agentfleet.Reservation, error) {
	if e.cfg.Meter == nil {
		return nil, nil
	}
	res, err := e.cfg.Meter.Reserve(ctx, run.Tenant, run.ID, tokens)
	if err != nil {
		var be *agentfleet.BudgetExhaustedError
		if errors.As(err, &be) {
			return nil, err
		}
		return nil, fmt.Errorf("reserve %d tokens for run %s: %w", tokens, run.ID, err)
	}
	return &res, nil
}

// call calls the model; a failed call releases its reservation.
func (e *Engine) call(ctx context.Context, run *agentfleet.Run, req agentfleet.ModelRequest, res *agentfleet.Reservation) (agentfleet.ModelResponse, error) {
	resp, err := e.cfg.Model.Complete(ctx, req)
	if err == nil {
		return resp, nil
	}
	if res != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := e.cfg.Meter.Release(rctx, *res); rerr != nil {
			return resp, fmt.Errorf("model call: %w (and releasing its reservation: %v)", err, rerr)
		}
	}
	return resp, fmt.Errorf("model call: %w", err)
}

// release gives back a reservation nothing will charge; a failure only
// leaves it to expire (the keeper releases it).
func (e *Engine) release(ctx context.Context, res *agentfleet.Reservation) {
	if res == nil || e.cfg.Meter == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = e.cfg.Meter.Release(rctx, *res)
}

// settle charges a call's usage to its reservation. It must happen even
// when the turn's context was cancelled mid-call: the tokens were spent.
func (e *Engine) settle(ctx context.Context, run *agentfleet.Run, res *agentfleet.Reservation, resp agentfleet.ModelResponse) error {
	if res == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.cfg.Meter.Settle(sctx, *res, resp.Usage, resp.Model); err != nil {
		return fmt.Errorf("settle %d tokens for run %s: %w", resp.Usage.Total(), run.ID, err)
	}
	return nil
}

// meteredCall reserves budget, calls the model and settles the
// reservation to what the call used (the ai() sub-calls).
func (e *Engine) meteredCall(ctx context.Context, run *agentfleet.Run, req agentfleet.ModelRequest, tokens int64) (agentfleet.ModelResponse, error) {
	res, err := e.reserve(ctx, run, tokens)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	resp, err := e.call(ctx, run, req, res)
	if err != nil {
		return resp, err
	}
	return resp, e.settle(ctx, run, res, resp)
}

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
			Primitives: t.in.Agent.Primitives, Egress: t.in.Agent.Egress, TurnTimeout: t.in.Agent.TurnTimeout.D(), AI: t.aiFunc(), Spawn: t.spawnFunc(), IsChild: t.isChild, Secrets: t.in.Secrets,
			Approve: t.in.Agent.Approve, Approval: t.in.Approval,
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
	observation := Observation(t.n, exec, carried, carriedBytes)
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

// aiFunc is the ai()/aiJSON() sub-call of this turn's script: metered
// through the same budget as the turn, its usage counted in the turn's,
// and held to the run's max_tokens and the turn's model call cap. A
// refused call is an error the script can catch.
func (t *turn) aiFunc() agentfleet.AIFunc {
	return func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		cfg := &t.e.cfg
		system := "Answer the request directly and concisely."
		if req.JSON || len(req.Schema) > 0 {
			system = "Reply with one JSON value only, no prose."
			if len(req.Schema) > 0 {
				system += " It must match this JSON Schema: " + string(req.Schema)
			}
		}
		msgs := []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}, {Role: agentfleet.RoleUser, Content: req.Prompt}}
		prompt := agentfleet.EstimateTokens(msgs)
		maxTokens, err := t.admitSubCall(prompt)
		if err != nil {
			return agentfleet.AIResponse{}, err
		}
		mreq := agentfleet.ModelRequest{
			Model: firstNonEmpty(t.in.Agent.Model, cfg.DefaultModel), Messages: msgs,
			MaxTokens: int(maxTokens), JSON: req.JSON || len(req.Schema) > 0,
		}
		var resp agentfleet.ModelResponse
		if t.journal != nil {
			resp, err = t.journal.call(ctx, req.Index, mreq, prompt+maxTokens)
		} else {
			resp, err = t.e.meteredCall(ctx, t.run, mreq, prompt+maxTokens)
		}
		t.mu.Lock()
		t.subUsage = t.subUsage.Add(resp.Usage)
		t.mu.Unlock()
		if err != nil {
			return agentfleet.AIResponse{}, err
		}
		t.emit(agentfleet.Event{Type: agentfleet.EventModelCall, Summary: "ai() " + resp.Model,
			Tokens: &agentfleet.Tokens{Prompt: resp.Usage.PromptTokens, Completion: resp.Usage.CompletionTokens}})
		return agentfleet.AIResponse{Content: resp.Content, Usage: resp.Usage}, nil
	}
}

// spawnFunc is spawn() for this turn's script: the caller's Spawn, held
// to the run's limits, each child announced with a child_spawned event.
func (t *turn) spawnFunc() agentfleet.SpawnFunc {
	if t.in.Spawn == nil {
		return nil
	}
	cfg := &t.e.cfg
	return func(ctx context.Context, index int, req agentfleet.SpawnRequest) (string, error) {
		if depth := t.run.Depth + 1; depth > cfg.MaxDepth {
			return "", fmt.Errorf("runs nest at most %d deep and a child of this run would be at depth %d: do the work in this run", cfg.MaxDepth, depth)
		}
		t.mu.Lock()
		n := t.run.Children + t.spawned
		t.mu.Unlock()
		if n >= cfg.MaxChildren {
			return "", fmt.Errorf("a run spawns at most %d children (max_children) and this one has %d", cfg.MaxChildren, n)
		}
		id, err := t.in.Spawn(ctx, index, req)
		if err != nil {
			return "", err
		}
		t.mu.Lock()
		t.spawned++
		if t.spawnedIDs == nil {
			t.spawnedIDs = map[string]bool{}
		}
		t.spawnedIDs[id] = true
		t.mu.Unlock()
		t.emit(agentfleet.Event{Type: agentfleet.EventChildSpawned, Summary: id, Content: t.clean(req.Message)})
		return id, nil
	}
}

// isChild is wait()'s check of an id: a child this turn spawned, or one
// the caller's IsChild knows.
func (t *turn) isChild(ctx context.Context, id string) (bool, error) {
	t.mu.Lock()
	mine := t.spawnedIDs[id]
	t.mu.Unlock()
	if mine || t.in.IsChild == nil {
		return mine, nil
	}
	return t.in.IsChild(ctx, id)
}

// admitSubCall counts a sub-call of prompt tokens against the turn's
// model call cap and the run's max_tokens, and returns the most it may
// complete.
func (t *turn) admitSubCall(prompt int64) (maxTokens int64, err error) {
	cfg := &t.e.cfg
	limit := firstPositive(t.in.Agent.MaxModelCallsPerTurn, cfg.MaxModelCallsPerTurn)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.calls >= limit {
		return 0, fmt.Errorf("this turn has made %d model calls, the most its agent allows (max_model_calls_per_turn %d): return what you have and go on next turn", t.calls, limit)
	}
	maxTokens = int64(cfg.AIMaxTokens)
	if run := t.run; run.MaxTokens > 0 {
		used := run.Usage.Total() + t.res.Usage.Total() + t.subUsage.Total()
		left := run.MaxTokens - used - prompt
		if left < 1 {
			return 0, fmt.Errorf("the run's max_tokens (%d) leaves no room for this call: %d used, its prompt about %d", run.MaxTokens, used, prompt)
		}
		maxTokens = min(maxTokens, left)
	}
	t.calls++
	return maxTokens, nil
}

// finish ends the run with status; answer or errMsg says how.
func (t *turn) finish(status agentfleet.RunStatus, answer json.RawMessage, errMsg string) TurnResult {
	t.res.Outcome = OutcomeFinished
	t.res.Status = status
	t.res.Answer = answer
	t.res.Error = errMsg
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
		ev.Content = t.redact.Replace(ev.Content)
		ev.Summary = t.redact.Replace(ev.Summary)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Events = append(t.res.Events, ev)
	if t.in.OnEvent != nil {
		t.in.OnEvent(ev)
	}
}

// clean redacts known secrets from text that goes into steps and events.
func (t *turn) clean(s string) string {
	if t.redact == nil {
		return s
	}
	return t.redact.Replace(s)
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
