// Package storetest is the contract every store backend must pass: one
// subtest per behaviour of store.Store, run by each backend's tests (so
// names read TestStore/sqlite/... and TestStore/postgres/...).
//
// It owns the meaning of the store interface where the doc comments leave
// room: what is validated, what a loser of a race sees, how budget windows
// roll. A change of behaviour starts here, then goes into every backend.
// It knows no backend; it is handed a function that opens a fresh store.
//
// What the suite settles, beyond store.go's comments:
//
//   - Errors: malformed parameters are ErrInvalid before any I/O; a
//     missing row, or a reference to one (tenant, run), is ErrNotFound; a
//     duplicate, a lost fence or a status not as required is ErrConflict,
//     and then nothing changed. Tenant and run ids are 1 to 128 letters,
//     digits, '-' or '_' (they are NATS subject tokens).
//   - Time: every timestamp comes back in UTC, truncated to microseconds,
//     equal across backends. A zero Now means the store's clock.
//   - TenantCreate defaults: window "day", weight 1, policy "queue"; it
//     also creates the tenant's "default" agent (empty persona and model:
//     the fleet's defaults).
//   - RunCreate writes the trace's first step, the message as a user step
//     at turn 0. An idempotent repeat returns the first run, no events,
//     and Startable as of now, even at the tenant's max_queued_runs; a
//     new run beyond it is a *store.QueueFullError (default cap
//     store.MaxQueuedRunsDefault).
//   - API keys have public ids ("key_" and 32 hex digits), list newest
//     first, and record their last use at most once a minute; a revoked
//     key is never found again, and revoking is scoped to the tenant.
//   - Sessions: runs are ordered by creation. A run's end hands out
//     SessionNext only when it was the session's head (no unfinished run
//     before it) and the next unfinished run is queued.
//   - TurnCommit: steps belong to the committed turn (a step may name it
//     or leave Turn zero) and are numbered by position; events with Turn
//     zero get the committed turn; a zero event TS means now. Nil Args or
//     Answer keep the stored value (a failed turn carries its args on), an
//     empty Error keeps the stored error, and a cancellation without an
//     error takes the reason of the requested cancel.
//   - RunList orders by creation (newest first unless Oldest); a cursor
//     of the other order is ErrInvalid. EventListByRun of an unknown run
//     is empty.
//   - Budget: reservations need positive tokens; the default lease is 15
//     minutes; the window limit is checked before the per-minute one. A
//     settle is capped at limit - used (overage recorded, never charged).
//     BudgetGet does not write: a due window shows rolled, and a due
//     duration window shows no bounds until the next use opens one.
//     Changing a tenant's window restarts it (used zero, reservations
//     kept); changing its limit does not.
//   - Unlimited tenants (token limit and tokens per minute both zero)
//     are never written per call: a reservation has an empty id and
//     leaves no trace (BudgetExpire finds nothing), releasing it is a
//     no-op, settling it names Tenant and RunID and charges the full
//     usage to the ledger, and BudgetGet sums the ledger over the window
//     as it would have rolled (a duration window opening at the first
//     settlement after the last one ended), with Reserved and MinuteUsed
//     zero. Any number of concurrent calls keep that sum exact. Given a
//     limit mid-window, a tenant starts from that sum, and calls it
//     reserved while unlimited are charged against the limit (capped).
//   - ModelReplyRecord with Charge charges exactly once per recorded
//     reply: not when the reply existed, not when the fence fails (the
//     reservation stays for the caller), and when the reservation is gone
//     the reply is still recorded and ChargeErr is ErrNotFound.
//   - JournalRecord records once per (run, turn, index) and charges as
//     ModelReplyRecord does; an entry with an error has no Result.
//   - Retention: a run is deleted only once it ended, with its steps,
//     events, model replies, journal and approvals; the usage ledger keeps its
//     rows. Deleting a session's ended runs never changes which run is
//     its head.
//   - Sessions (SessionList, SessionGet, SessionDelete) are read from
//     their runs; a delete takes every run of the session or, while one
//     has not ended, none.
//   - Steps and events of a commit, a batch of commits, a run's creation
//     or an append land whole and in order at any count (0, 1, 150, ...).
//   - Text: what scripts and models produce (steps, events, args, answers,
//     errors, replies) is stored with each NUL and invalid byte as U+FFFD
//     (in JSON an escaped \u0000 as \ufffd); what a client submits (a
//     run's message, metadata, context, ids; agents', skills', triggers'
//     text) with either is ErrInvalid naming the field.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// NewStore opens a store on a fresh, empty database and registers its
// own cleanup with t.
type NewStore func(t *testing.T) store.Store

// Opener returns a function that opens a store on one fresh, empty
// database; every call of it opens another store on that same database
// (the suite closes what it opens). The migration tests need it.
type Opener func(t *testing.T) func(ctx context.Context) (store.Store, error)

type config struct {
	opener Opener
}

// Option configures Exercise.
type Option func(*config)

// WithOpener enables the tests that open one database more than once
// (migrations applied twice, and by two stores at once).
func WithOpener(o Opener) Option { return func(c *config) { c.opener = o } }

// Exercise runs the contract suite. Subtests run in parallel, each on a
// store of its own.
func Exercise(t *testing.T, newStore NewStore, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	for _, g := range []struct {
		name string
		run  func(t *testing.T, newStore NewStore)
	}{
		{"Tenant", testTenant},
		{"APIKey", testAPIKey},
		{"Agent", testAgent},
		{"RunCreate", testRunCreate},
		{"QueueCap", testQueueCap},
		{"RunList", testRunList},
		{"Session", testSession},
		{"Sessions", testSessions},
		{"RunTransition", testRunTransition},
		{"RunCancel", testRunCancel},
		{"TurnLoad", testTurnLoad},
		{"ModelReply", testModelReply},
		{"Journal", testJournal},
		{"TurnCommit", testTurnCommit},
		{"TurnCommitMany", testTurnCommitMany},
		{"TurnCommitSizes", testTurnCommitSizes},
		{"Events", testEvents},
		{"Budget", testBudget},
		{"Approval", testApproval},
		{"Batch", testBatch},
		{"Trigger", testTrigger},
		{"TriggerDelivery", testTriggerDelivery},
		{"RunCallback", testRunCallback},
		{"Skill", testSkill},
		{"Secret", testSecret},
		{"Retention", testRetention},
		{"Text", testText},
		{"Children", testChildren},
		{"Stats", testStats},
	} {
		t.Run(g.name, func(t *testing.T) { g.run(t, newStore) })
	}
	t.Run("Migrate", func(t *testing.T) { testMigrate(t, cfg.opener) })
}

// bundle is what a subtest works with.
type bundle struct {
	ctx context.Context
	s   store.Store
}

// setup returns a parallel subtest's fresh store.
func setup(t *testing.T, newStore NewStore) bundle {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return bundle{ctx: ctx, s: newStore(t)}
}

var seq atomic.Int64

// unique returns an id no other call returns.
func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

func (b bundle) tenant(t *testing.T, p store.TenantCreateParams) agentfleet.Tenant {
	t.Helper()
	if p.ID == "" {
		p.ID = unique("tenant")
	}
	ten, err := b.s.TenantCreate(b.ctx, p)
	require.NoError(t, err)
	return ten
}

func (b bundle) run(t *testing.T, p store.RunCreateParams) agentfleet.Run {
	t.Helper()
	res, err := b.s.RunCreate(b.ctx, p)
	require.NoError(t, err)
	require.True(t, res.Created)
	return res.Run
}

// started creates a run and moves it to running.
func (b bundle) started(t *testing.T, tenant string) agentfleet.Run {
	t.Helper()
	r := b.run(t, store.RunCreateParams{Tenant: tenant, Message: "task"})
	return b.transition(t, r.ID, agentfleet.StatusRunning)
}

func (b bundle) transition(t *testing.T, id string, to agentfleet.RunStatus) agentfleet.Run {
	t.Helper()
	res, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: id, To: to})
	require.NoError(t, err)
	return res.Run
}

func (b bundle) get(t *testing.T, id string) agentfleet.Run {
	t.Helper()
	r, err := b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: id})
	require.NoError(t, err)
	return r
}

func (b bundle) events(t *testing.T, id string) []agentfleet.Event {
	t.Helper()
	evs, err := b.s.EventListByRun(b.ctx, store.EventListByRunParams{RunID: id})
	require.NoError(t, err)
	return evs
}

func (b bundle) steps(t *testing.T, id string) []agentfleet.Step {
	t.Helper()
	steps, err := b.s.StepListByRun(b.ctx, store.StepListByRunParams{RunID: id})
	require.NoError(t, err)
	return steps
}

// commitParams is a realistic turn: a model step and an observation, a
// few events, carried args.
func commitParams(runID string, turn int, status agentfleet.RunStatus, tag string) store.TurnCommitParams {
	args, _ := json.Marshal(map[string]any{"turn": turn, "tag": tag})
	return store.TurnCommitParams{
		RunID: runID, Turn: turn, Status: status, Args: args,
		Steps: []agentfleet.Step{
			{Kind: agentfleet.StepModel, Content: "reply " + tag, Model: "m1", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}},
			{Kind: agentfleet.StepObservation, Content: "observed " + tag},
		},
		Events: []agentfleet.Event{
			{Type: agentfleet.EventModelCall, Content: tag, Tokens: &agentfleet.Tokens{Prompt: 10, Completion: 5}},
			{Type: agentfleet.EventExecuteJSResult, Summary: tag},
		},
		Usage:            agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5},
		DataBytesCarried: 7,
	}
}

// requireSeqs checks events are numbered first, first+1, ...
func requireSeqs(t *testing.T, evs []agentfleet.Event, first int64) {
	t.Helper()
	for i, e := range evs {
		require.Equal(t, first+int64(i), e.Seq, "event %d", i)
	}
}

// day is a fixed instant the budget tests compute windows from.
var day = time.Date(2025, time.March, 14, 10, 30, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// atOnce calls fn(i) for every i in [0, n) from n goroutines released
// together, and returns what each call returned.
func atOnce[T any](n int, fn func(i int) (T, error)) ([]T, []error) {
	results, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

// concurrently runs fn(w) for every w in [0, n) at once and fails t with
// the errors they return.
func concurrently(t *testing.T, n int, fn func(w int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() { errs[w] = fn(w) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}
