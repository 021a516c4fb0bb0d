// Package store declares the store of record: tenants, API keys, agents,
// runs, the step trace and the side-effect journal, carried state, events
// (the outbox every published RunEvent comes from), the budget ledger,
// approvals, batches, triggers and skills.
//
// There are two backends behind the one Store interface: store/postgres
// (pgx v5, production) and store/sqlite (modernc.org/sqlite, the embedded
// default). Most of the interface is implemented once, in
// store/internal/rules, over the SQL primitives each backend exports as a
// store/driver.Driver (held to store/driver/drivertest); the rest each
// backend implements itself. Both are held to one contract suite,
// store/storetest; a change of behaviour starts there. Nothing outside the backends sees a driver
// type, and callers branch only on the sentinel errors declared here, on
// *QueueFullError and on *agentfleet.BudgetExhaustedError.
//
// A tenant's runs not yet finished are capped (max_queued_runs): RunCreate
// refuses a run beyond the cap with a *QueueFullError, found without
// counting a large backlog per submission (see RunCreate).
//
// Every method that changes a run appends the run's events in the same
// transaction and returns them with their seq assigned, so seq is dense per
// run no matter which process appended them; the caller publishes what it
// got back.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// Sentinel errors. Backends wrap them with context; test with errors.Is.
var (
	// ErrNotFound: no such row (or not visible to the given tenant).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write lost a race or its precondition failed
	// (turn fence, duplicate id, status not as expected). Nothing changed.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the parameters are malformed (unknown status, illegal
	// transition, negative tokens).
	ErrInvalid = errors.New("invalid")
	// ErrUnknownAgent: a run names an agent its tenant does not have
	// (never defined, or deleted). It is also ErrInvalid.
	ErrUnknownAgent = fmt.Errorf("unknown agent (%w)", ErrInvalid)
)

// MaxQueuedRunsDefault is a tenant's max_queued_runs when none is given:
// far above the largest batch, so only a runaway submitter meets it.
const MaxQueuedRunsDefault = 1_000_000

// QueueFullError is RunCreate's refusal of runs beyond their tenant's
// max_queued_runs. Nothing was written.
type QueueFullError struct {
	Tenant string
	// Unfinished is how many of the tenant's runs were not finished
	// (queued, running or waiting) when it was decided; Limit is the
	// tenant's max_queued_runs; Requested how many runs were asked for.
	Unfinished, Limit, Requested int
	// RetryAfter is how long the caller should wait before trying again.
	RetryAfter time.Duration
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("tenant %s has %d runs not finished (queued, running or waiting) and may have at most %d (max_queued_runs): "+
		"wait for some to end, cancel some, or raise the tenant's max_queued_runs", e.Tenant, e.Unfinished, e.Limit)
}

// Store is the store of record. Methods are named NounVerb and take one
// params struct each, so call sites read like sentences and grow without
// breaking. All are safe for concurrent use.
type Store interface {
	// Close releases the backend's connections.
	Close() error

	TenantCreate(ctx context.Context, p TenantCreateParams) (agentfleet.Tenant, error)
	TenantGetByID(ctx context.Context, id string) (agentfleet.Tenant, error)
	// TenantUpdate changes the set fields of a tenant (see
	// TenantUpdateParams). Giving an unlimited tenant a limit carries
	// its usage ledger's sum for the current window into its budget in
	// the same transaction, so the ceiling holds from that moment.
	TenantUpdate(ctx context.Context, p TenantUpdateParams) (agentfleet.Tenant, error)
	// TenantList lists tenants, newest first (tenants made in the same
	// microsecond by id, descending).
	TenantList(ctx context.Context, p TenantListParams) (TenantListResult, error)

	// APIKeyCreate stores the hash of a key for a tenant under a fresh
	// public id and returns the key's record. The key itself is never
	// stored. A key stored before is ErrConflict.
	APIKeyCreate(ctx context.Context, p APIKeyCreateParams) (APIKey, error)
	// APIKeyList lists a tenant's keys, newest first; it never shows a
	// key or its hash.
	APIKeyList(ctx context.Context, p APIKeyListParams) (APIKeyListResult, error)
	// APIKeyDelete revokes a tenant's key: no lookup finds it once the
	// call returns. An unknown id, or another tenant's, is ErrNotFound.
	APIKeyDelete(ctx context.Context, p APIKeyDeleteParams) error
	// TenantGetByAPIKey hashes Key and returns its tenant and the key's
	// record, or ErrNotFound. It records the use: the key's LastUsedAt
	// is written only when older than about a minute, so lookups are
	// not writes.
	TenantGetByAPIKey(ctx context.Context, p TenantGetByAPIKeyParams) (TenantGetByAPIKeyResult, error)

	// AgentUpsert defines an agent or replaces it whole. A spec unlike
	// the current one becomes the agent's next version (numbered on
	// from the versions it had before a delete, from 1); the current
	// spec again changes nothing. An unknown tenant is ErrNotFound.
	AgentUpsert(ctx context.Context, p AgentUpsertParams) (agentfleet.Agent, error)
	// AgentGetByName reads an agent's current version, or with Version
	// set that version, which outlives replacements and the agent's
	// delete: a run admitted under it uses it to its end.
	AgentGetByName(ctx context.Context, p AgentGetByNameParams) (agentfleet.Agent, error)
	// AgentList pages a tenant's agents (current versions), newest
	// first.
	AgentList(ctx context.Context, p AgentListParams) (AgentListResult, error)
	// AgentDelete deletes an agent: no new run can name it, while runs
	// admitted under one of its versions keep it. The tenant's default
	// agent cannot be deleted (ErrInvalid); an unknown one is
	// ErrNotFound.
	AgentDelete(ctx context.Context, p AgentDeleteParams) error

	// RunCreate creates a run in status queued, under the current
	// version of its agent (an agent the tenant does not have is
	// ErrUnknownAgent), or returns the existing
	// run when (tenant, idempotency key) was seen before (Created false),
	// even when the tenant is at its cap. A new run that would take the
	// tenant's unfinished runs past its max_queued_runs is a
	// *QueueFullError. One store never passes the cap; stores in
	// several processes pass it at most by what the others admitted
	// since a store's last count, which near the cap is at most a
	// second old (rules/queue.go).
	RunCreate(ctx context.Context, p RunCreateParams) (RunCreateResult, error)
	RunGetByID(ctx context.Context, p RunGetByIDParams) (agentfleet.Run, error)
	// TurnLoad reads what a worker needs to execute turn Turn of a run,
	// in one round trip where the backend allows: the run, whether its
	// tenant is unlimited, and (for Turn > 1) its steps from HistoryFrom.
	// When the run is queued for this turn (it has committed Turn-1:
	// a new run for turn 1, or one put back in the queue) and no cancel
	// was requested, it is started (running) in the same statement and
	// Started is set. An unknown run is ErrNotFound.
	TurnLoad(ctx context.Context, p TurnLoadParams) (TurnLoadResult, error)
	RunList(ctx context.Context, p RunListParams) (RunListResult, error)
	// RunTransition moves a run between statuses outside a turn commit
	// (start, park, resume, fail, finish); illegal transitions are
	// ErrInvalid, a current status not in From is ErrConflict.
	RunTransition(ctx context.Context, p RunTransitionParams) (RunChangeResult, error)
	// RunCancel cancels a run: at once when it is queued or waiting,
	// otherwise by setting CancelRequested so the worker stops it at the
	// next turn boundary. Cancelling a cancelled run is a no-op; a run
	// that ended otherwise is ErrConflict.
	RunCancel(ctx context.Context, p RunCancelParams) (RunCancelResult, error)
	// RunFamilySettle settles what a run's end owes other runs, and is safe to
	// repeat: its parent, waiting for it, resumes (running, its wake
	// counted) once every child it waits for has ended; its unfinished
	// children are cancelled: at once when queued or waiting (and theirs
	// in turn), at their next turn boundary when running; a batch run's
	// batch releases its next held runs while below its max_concurrent.
	// A run that has not ended owes nothing.
	RunFamilySettle(ctx context.Context, p RunFamilySettleParams) (RunFamilySettleResult, error)
	// RunFamilySettleDue settles what RunFamilySettle's callers missed (a process
	// that died in between, a wait that timed out): it wakes up to Limit
	// runs waiting for children that have all ended or whose wait ended
	// by Now, and settles up to Limit ended runs with unfinished
	// children as RunFamilySettle would.
	RunFamilySettleDue(ctx context.Context, p RunFamilySettleDueParams) (RunFamilySettleResult, error)
	// RunChildrenUsage sums the usage of every run below id (its
	// children, theirs, and so on).
	RunChildrenUsage(ctx context.Context, id string) (agentfleet.Usage, error)
	// RunCountActive counts a tenant's running runs: those that hold, or
	// are about to hold, a worker. Runs waiting (for budget, approval or
	// children) do not count.
	RunCountActive(ctx context.Context, tenant string) (int, error)
	// RunCountByStatus counts a tenant's runs by status (statuses with
	// no runs are absent from the map).
	RunCountByStatus(ctx context.Context, tenant string) (map[agentfleet.RunStatus]int, error)

	// ModelReplyRecord records the model's reply of a turn before its
	// script runs. Fenced like TurnCommit: the run must have committed
	// exactly Turn-1 turns and not have ended, else ErrConflict. When
	// the turn already has a reply, that reply is returned with Existed
	// set and nothing changes, so a redelivered turn never pays twice.
	//
	// With Charge set, the call also settles the model call's budget in
	// the same transaction as the reply insert (one write per turn
	// instead of two), with exactly BudgetSettle's semantics. The charge
	// happens only when this call records the reply: when the reply
	// Existed, or the call fails (ErrConflict from the fence, or any
	// error), nothing is charged and the reservation is untouched, so
	// the caller settles (or releases) it with BudgetSettle as before.
	// When the reply is recorded but the charge cannot be (the
	// reservation was settled, released or expired: ErrNotFound), the
	// reply is kept, the error is ModelReplyRecordResult.ChargeErr and
	// the call itself succeeds, so the caller can fall back. So the
	// charge happened exactly when err == nil, !Existed and
	// ChargeErr == nil; Settled then holds its outcome. A malformed
	// Charge is ErrInvalid for the whole call, before anything is
	// written.
	ModelReplyRecord(ctx context.Context, p ModelReplyRecordParams) (ModelReplyRecordResult, error)
	// ModelReplyGet returns the recorded reply of a turn, or ErrNotFound.
	ModelReplyGet(ctx context.Context, runID string, turn int) (ModelReply, error)

	// JournalRecord records a side-effecting call of a turn's script
	// before the script sees its outcome (docs/ARCHITECTURE.md §4).
	// Fenced like ModelReplyRecord: the run must have committed exactly
	// Turn-1 turns and not have ended, else ErrConflict. An entry
	// already recorded under (run, turn, index) is returned with Existed
	// set and nothing changes. Charge settles an ai() call's budget in
	// the same transaction, exactly as ModelReplyRecord's does.
	JournalRecord(ctx context.Context, p JournalRecordParams) (JournalRecordResult, error)
	// JournalListByRun returns a run's journal in (turn, index) order.
	JournalListByRun(ctx context.Context, p JournalListByRunParams) ([]agentfleet.JournalEntry, error)

	// TurnCommit commits one turn in one transaction: appends its steps
	// and events, stores the new carried state and advances the run.
	// Fenced by turn number: the run must have committed exactly Turn-1
	// turns and not have ended, else ErrConflict and nothing changes.
	TurnCommit(ctx context.Context, p TurnCommitParams) (RunChangeResult, error)
	// TurnCommitMany commits several turns (of different runs) in one
	// transaction. Each is fenced on its own: errs[i] is ErrConflict for
	// a commit that lost, and the others still land. The returned error
	// is for the batch as a whole (connection lost: nothing landed).
	TurnCommitMany(ctx context.Context, ps []TurnCommitParams) (results []RunChangeResult, errs []error, err error)

	// StepListByRun returns a run's trace in (turn, index) order.
	StepListByRun(ctx context.Context, p StepListByRunParams) ([]agentfleet.Step, error)

	// EventAppend appends events to a run outside a turn commit.
	EventAppend(ctx context.Context, p EventAppendParams) ([]agentfleet.Event, error)
	// EventListByRun returns a run's events with seq > AfterSeq, in order.
	EventListByRun(ctx context.Context, p EventListByRunParams) ([]agentfleet.Event, error)

	// BudgetReserve reserves tokens for one model call, only when
	// used + reserved + Tokens <= limit in the tenant's current window
	// (and the per-minute limit, when set, allows it); atomic under any
	// concurrency. Rolls the window first when Now is past its end.
	// Refusal is a *agentfleet.BudgetExhaustedError.
	//
	// An unlimited tenant (token limit 0 and tokens per minute 0) has
	// nothing to reserve against: the call only reads the tenant, writes
	// nothing, and returns a Reservation with an empty ID (Tenant,
	// RunID, Tokens and LeaseUntil still filled). Settle it with
	// BudgetSettleParams.Tenant and RunID; releasing it is a no-op.
	//
	// A reservation is a hold, not a record the caller relies on: a
	// backend may commit it without waiting for the disk (store/postgres
	// does, so a limited tenant's turns queue on its row for one flush
	// per turn instead of two), and a crash of the database itself may
	// then lose it. Settling a lost reservation is ErrNotFound, as after
	// a lease expiry; the limit holds either way.
	BudgetReserve(ctx context.Context, p BudgetReserveParams) (agentfleet.Reservation, error)
	// BudgetSettle turns a reservation into usage. The charge is the
	// reported usage, capped so used never exceeds the limit; what the
	// cap cut is returned as Overage (and kept in the ledger).
	//
	// With an empty ReservationID (an unlimited tenant's reservation)
	// the usage is charged to Tenant and RunID: for a tenant still
	// unlimited, only the usage ledger row is appended (charged = the
	// full reported usage, overage 0) and the tenant row is not
	// touched; for a tenant given a limit since it reserved, the charge
	// is applied to its budget like any other (capped, no reservation
	// to drop). An unknown tenant is ErrNotFound.
	BudgetSettle(ctx context.Context, p BudgetSettleParams) (BudgetSettleResult, error)
	// BudgetRelease drops a reservation without charging it. Releasing
	// the empty ID (an unlimited tenant's reservation) is a no-op.
	BudgetRelease(ctx context.Context, reservationID string) error
	// BudgetExpire releases reservations whose lease ended before Now.
	BudgetExpire(ctx context.Context, now time.Time) (released int, err error)
	// BudgetGet returns the tenant's budget as of Now (rolled if due).
	//
	// For an unlimited tenant, whose row is not written per call, Used
	// is computed from the usage ledger: the sum charged within the
	// window as the ledger would have rolled it (a calendar window is
	// the one Now falls in; a duration window opens at the first
	// settlement after the previous one ended, and one that has ended
	// shows no bounds and zero used). Reserved and MinuteUsed are 0.
	BudgetGet(ctx context.Context, tenant string, now time.Time) (agentfleet.BudgetState, error)
	// UsageList sums settled usage of a tenant, grouped by model or run.
	UsageList(ctx context.Context, p UsageListParams) ([]UsageRow, error)

	// ApprovalRequest parks a run on a call that needs approval, in one
	// transaction: it stores the call's approval (pending, unless the
	// call, the same index and digest, has one already) and, while that
	// is pending, moves the run
	// from running to waiting_approval with an approval_requested event
	// (Parked). An approval decided meanwhile parks nothing: the run
	// stays running, its wake counted, and its turn is due again. Fenced
	// like TurnCommit (the run must be running at Turn-1, else
	// ErrConflict); a run whose cancel was requested is ErrConflict too.
	ApprovalRequest(ctx context.Context, p ApprovalRequestParams) (ApprovalRequestResult, error)
	// ApprovalGetForCall is where the approval of a call stands: the call's
	// own (run, turn, call index and digest: an approval of another call
	// at that index is not its), else an approved session-scoped grant
	// of the same method and URL (and primitive; fetch and http are one)
	// in the run's session, else ErrNotFound.
	ApprovalGetForCall(ctx context.Context, p ApprovalGetForCallParams) (Approval, error)
	// ApprovalGetByID reads an approval; a non-empty Tenant scopes it.
	ApprovalGetByID(ctx context.Context, p ApprovalGetByIDParams) (Approval, error)
	// ApprovalList pages approvals, newest first.
	ApprovalList(ctx context.Context, p ApprovalListParams) (ApprovalListResult, error)
	// ApprovalDecide approves or denies a pending approval, appends an
	// approved or denied event to its run and, when the run waits for
	// it, resumes the run (running, its wake counted; Woken): its turn
	// is due again. Deciding twice, or for a run that ended, is
	// ErrConflict; a session scope for a run without a session is
	// ErrInvalid.
	ApprovalDecide(ctx context.Context, p ApprovalDecideParams) (ApprovalDecideResult, error)
	// ApprovalExpire denies, with reason ApprovalExpired, up to Limit
	// pending approvals whose time ran out by Now, and with reason
	// ApprovalRunEnded those whose run ended, as ApprovalDecide would.
	ApprovalExpire(ctx context.Context, p ApprovalExpireParams) ([]ApprovalDecideResult, error)
	// ApprovalCountPending counts pending approvals by tenant.
	ApprovalCountPending(ctx context.Context) (map[string]int, error)
	// ApprovalNotifyClaim hands out up to Limit approvals whose
	// notification (the agent's approval_callback_url) is due at Now,
	// moving the next attempt Lease ahead; ApprovalNotifyRecord records
	// an attempt.
	ApprovalNotifyClaim(ctx context.Context, p ApprovalNotifyClaimParams) ([]Approval, error)
	ApprovalNotifyRecord(ctx context.Context, p ApprovalNotifyRecordParams) error

	// BatchAdmit starts admitting a batch: the batch and its runs stay
	// invisible (BatchGetByID, BatchList and RunList do not see them)
	// until the admission commits, and leave nothing behind when it is
	// aborted. A batch whose (tenant, idempotency key) was admitted
	// before is returned as Existing instead, with no admission.
	BatchAdmit(ctx context.Context, p BatchAdmitParams) (BatchAdmitResult, error)
	// BatchGetByID reads a batch with its runs counted by status and
	// their usage summed.
	BatchGetByID(ctx context.Context, p BatchGetByIDParams) (Batch, error)
	// BatchList pages a tenant's batches, newest first (without counts).
	BatchList(ctx context.Context, p BatchListParams) (BatchListResult, error)
	// BatchRunList reads a batch's runs in input order, from AfterIndex+1.
	BatchRunList(ctx context.Context, p BatchRunListParams) ([]BatchRun, error)
	// BatchCancel marks a batch cancelled (it stays so: repeating is a
	// no-op) and cancels up to Limit of its runs not yet ended or asked
	// to stop, as RunCancel would; More says some may be left.
	BatchCancel(ctx context.Context, p BatchCancelParams) (BatchCancelResult, error)
	// BatchRunIsHeld reports whether a queued batch run is held back by its
	// batch's max_concurrent (not released yet): no turn of it is due.
	BatchRunIsHeld(ctx context.Context, runID string) (bool, error)
	// BatchSweep settles what runs' ends owe their batches that RunFamilySettle's
	// callers missed: it releases held runs of batches below their
	// max_concurrent, and finishes batches whose runs have all ended
	// (finished_at set; running becomes completed). What an admission
	// left behind when its process died (neither committed nor aborted
	// for an hour) is deleted.
	BatchSweep(ctx context.Context, p BatchSweepParams) (BatchSweepResult, error)
	// BatchUnfinished lists batches not finished yet, oldest first, for
	// their progress events.
	BatchUnfinished(ctx context.Context, limit int) ([]Batch, error)

	// TriggerCreate stores a trigger; a duplicate ID is ErrConflict.
	TriggerCreate(ctx context.Context, p TriggerCreateParams) (Trigger, error)
	TriggerGetByID(ctx context.Context, p TriggerGetByIDParams) (Trigger, error)
	// TriggerList pages a tenant's triggers, newest first.
	TriggerList(ctx context.Context, p TriggerListParams) (TriggerListResult, error)
	// TriggerUpdate changes the set fields. A new Secret moves the
	// current one to PrevSecret, valid until PrevSecretUntil.
	TriggerUpdate(ctx context.Context, p TriggerUpdateParams) (Trigger, error)
	// TriggerDelete deletes a trigger and its delivery log.
	TriggerDelete(ctx context.Context, p TriggerDeleteParams) error
	// TriggerDeliveryRecord appends lines to triggers' delivery logs in
	// one transaction, and drops each trigger's lines older than its
	// last Keep. A line of an unknown trigger is ErrNotFound, and none
	// of the lines is recorded.
	TriggerDeliveryRecord(ctx context.Context, p TriggerDeliveryRecordParams) ([]TriggerDelivery, error)
	// TriggerDeliveryList pages a trigger's delivery log, newest first.
	TriggerDeliveryList(ctx context.Context, p TriggerDeliveryListParams) (TriggerDeliveryListResult, error)
	// TriggerDigestClaim claims, in one transaction, each claim's body
	// digest for its delivery: the first delivery to claim a trigger's
	// digest holds it for Window, and a later claim of it within Window
	// gets that first delivery back (a signed body replayed under a new
	// delivery id). It returns the holder of each claim, in order, and
	// drops the claims of those triggers that are older than Window. A
	// claim of an unknown trigger fails the call.
	TriggerDigestClaim(ctx context.Context, p TriggerDigestClaimParams) ([]string, error)

	// TenantCallbackSecretSet stores (or replaces) a tenant's sealed
	// callback secret; TenantCallbackSecretGet reads it (ErrNotFound:
	// none).
	TenantCallbackSecretSet(ctx context.Context, p TenantCallbackSecretSetParams) error
	TenantCallbackSecretGet(ctx context.Context, tenant string) (string, error)
	// RunCallbackCreate records that run RunID (made next, or already)
	// is to be called back at URL when it ends; one per run
	// (ErrConflict).
	RunCallbackCreate(ctx context.Context, p RunCallbackCreateParams) (RunCallback, error)
	RunCallbackGetByID(ctx context.Context, runID string) (RunCallback, error)
	// RunCallbackClaim hands out up to Limit pending callbacks whose run
	// has ended and whose next attempt is due at Now, oldest due first,
	// moving their next attempt Lease ahead so that no other caller
	// takes them meanwhile.
	RunCallbackClaim(ctx context.Context, p RunCallbackClaimParams) ([]RunCallback, error)
	// RunCallbackRecord records an attempt: it counts it, keeps it in
	// the callback's log (the last CallbackLogMax), and sets the state
	// and the next attempt.
	RunCallbackRecord(ctx context.Context, p RunCallbackRecordParams) (RunCallback, error)
	// RunCallbackPrune deletes callbacks created before Before whose run
	// does not exist (never made, or deleted).
	RunCallbackPrune(ctx context.Context, before time.Time) (int, error)

	SkillUpsert(ctx context.Context, p SkillUpsertParams) (Skill, error)
	SkillGetByName(ctx context.Context, tenant, name string) (Skill, error)
	SkillList(ctx context.Context, tenant string) ([]Skill, error)

	// RunDeleteEnded deletes up to Limit runs that ended (completed,
	// failed, cancelled, max turns) before EndedBefore, oldest first,
	// with everything that belongs to them: steps, events, model replies
	// and approvals. The usage ledger is kept. It returns how many runs
	// it deleted; fewer than Limit means no more are due. One call is one
	// short transaction, so a sweep calls it repeatedly. A table added
	// later that belongs to a run (the side-effect journal) must go with
	// it too: ON DELETE CASCADE, or on Postgres the runs_delete_children
	// trigger, checked in storetest/retention.go.
	RunDeleteEnded(ctx context.Context, p RunDeleteEndedParams) (deleted int, err error)
	// RunDelete deletes one ended run the same way. A run that has not
	// ended is ErrConflict (cancel it first); an unknown run, or another
	// tenant's when Tenant is set, is ErrNotFound.
	RunDelete(ctx context.Context, p RunDeleteParams) error
}

// TenantCreateParams creates a tenant. Zero TokenLimit means unlimited;
// Window is agentfleet.WindowDay, WindowMonth or a Go duration ("24h").
type TenantCreateParams struct {
	ID                string
	TokenLimit        int64
	Window            agentfleet.BudgetWindow
	TokensPerMinute   int64
	MaxConcurrentRuns int
	// MaxQueuedRuns caps runs not finished; zero means
	// MaxQueuedRunsDefault.
	MaxQueuedRuns int
	Weight        int // zero means 1
	Exhausted     agentfleet.ExhaustedPolicy
	// DefaultAgent is the spec of the tenant's "default" agent (its
	// version 1).
	DefaultAgent agentfleet.AgentSpec
}

// TenantUpdateParams changes the set fields of a tenant. Changing the
// window restarts it (used 0, reservations kept; the next use opens
// the new window).
//
// Giving an unlimited tenant a limit (a token limit or a per-minute
// one) sets, in the same transaction, its used to what the usage
// ledger has charged in the current window (opening the window a use
// now would open when none is), and its minute's count to what the
// ledger has charged in the current minute, so the ceiling holds from
// that moment. Settlements of reservations taken while it was
// unlimited are charged against the new limit (capped). A window
// change in the same update wins: the window restarts from zero.
type TenantUpdateParams struct {
	ID                string
	TokenLimit        *int64
	Window            *agentfleet.BudgetWindow
	TokensPerMinute   *int64
	MaxConcurrentRuns *int
	MaxQueuedRuns     *int // zero means MaxQueuedRunsDefault
	Weight            *int
	Exhausted         *agentfleet.ExhaustedPolicy
}

type TenantListParams struct {
	Limit  int // zero: 50
	Cursor string
}

type TenantListResult struct {
	Tenants    []agentfleet.Tenant
	NextCursor string // empty on the last page
}

// APIKey is a tenant's API key as the store shows it: never the key or
// its hash.
type APIKey struct {
	// ID names the key in URLs ("key_" and 32 hex digits); it is not
	// secret.
	ID     string
	Tenant string
	Name   string
	// Scopes are what the key may do, in APIKeyScopes' order.
	Scopes     []string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero: never used
}

// The scopes of an API key (DESIGN §15): admin manages the tenant's
// keys, callback secret, secrets, agents and triggers; submit starts
// and stops work (runs, batches, approvals); read reads.
const (
	ScopeAdmin  = "admin"
	ScopeSubmit = "submit"
	ScopeRead   = "read"
)

// APIKeyScopes are every scope, in the order a key lists them; a key
// made without scopes has them all.
var APIKeyScopes = []string{ScopeAdmin, ScopeSubmit, ScopeRead}

// APIKeyCreateParams stores Key (hashed) for Tenant. Name says what it is
// for (at most 100 bytes); Scopes what it may do (nil: every scope).
type APIKeyCreateParams struct {
	Tenant string
	Key    string
	Name   string
	Scopes []string
}

// APIKeyListParams pages a tenant's keys, newest first. Cursor is the
// NextCursor of the previous page.
type APIKeyListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type APIKeyListResult struct {
	Keys       []APIKey
	NextCursor string // empty on the last page
}

type APIKeyDeleteParams struct {
	Tenant string
	ID     string
}

// TenantGetByAPIKeyParams looks up Key; Now is when it is used (zero:
// the store's clock).
type TenantGetByAPIKeyParams struct {
	Key string
	Now time.Time
}

type TenantGetByAPIKeyResult struct {
	Tenant agentfleet.Tenant
	Key    APIKey
}

type AgentUpsertParams struct {
	Tenant string
	Name   string
	Spec   agentfleet.AgentSpec
}

// AgentGetByNameParams reads an agent; Version zero means its current
// version.
type AgentGetByNameParams struct {
	Tenant  string
	Name    string
	Version int
}

type AgentListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type AgentListResult struct {
	Agents     []agentfleet.Agent
	NextCursor string // empty on the last page
}

type AgentDeleteParams struct {
	Tenant string
	Name   string
}

// RunCreateParams creates a run. ID is generated (time-ordered UUIDv7)
// when empty.
type RunCreateParams struct {
	ID             string
	Tenant         string
	Agent          string
	SessionID      string
	Message        string
	Context        json.RawMessage
	Metadata       map[string]string
	IdempotencyKey string
	MaxTurns       int
	MaxTokens      int64
	Deadline       time.Time
	BatchID        string
	// ParentRunID and Depth make the run a child of another (spawn()).
	ParentRunID string
	Depth       int
	// Events are appended in the same transaction (seq from 1), only
	// when the run is created.
	Events []agentfleet.Event
}

type RunCreateResult struct {
	Run agentfleet.Run
	// Created is false when an earlier run with the same idempotency
	// key was returned instead.
	Created bool
	// Startable is true when the run may start now: it has no session,
	// or every earlier run of its session has ended. A run that is not
	// startable is handed out later as SessionNext.
	Startable bool
	Events    []agentfleet.Event
}

// RunGetByIDParams reads a run; a non-empty Tenant scopes the lookup, so
// another tenant's run is ErrNotFound.
type RunGetByIDParams struct {
	ID     string
	Tenant string
}

// TurnLoadParams says which turn of which run a worker is about to
// execute.
type TurnLoadParams struct {
	RunID string
	Turn  int
	// HistoryFrom is the first turn whose steps are loaded (the engine's
	// history window); steps are loaded only for Turn > 1.
	HistoryFrom int
}

// TurnLoadResult is what TurnLoad read.
type TurnLoadResult struct {
	Run agentfleet.Run
	// Started says this call moved the run from queued to running.
	Started bool
	// TenantUnlimited says the run's tenant had no token limit and no
	// per-minute limit when it was read, so the turn's model call has
	// nothing to reserve (see BudgetReserve). A limit set after the read
	// still applies at the charge (ModelReplyRecord, BudgetSettle).
	TenantUnlimited bool
	// Steps are the run's steps from HistoryFrom through Run.Turn. They
	// are loaded only when Turn > 1 and the run stands at Turn-1
	// (HistoryLoaded); otherwise the turn is not the run's next one and
	// the caller does not execute it.
	Steps         []agentfleet.Step
	HistoryLoaded bool
}

// RunListParams filters and pages runs, newest first. An empty Tenant
// lists all tenants (internal use). Cursor is the NextCursor of the
// previous page.
type RunListParams struct {
	Tenant    string
	Status    []agentfleet.RunStatus
	Agent     string
	SessionID string
	BatchID   string
	// ParentRunID lists that run's children.
	ParentRunID string
	Limit       int // zero: 50
	Cursor      string
	// Oldest lists oldest first instead (for resuming parked runs in
	// order).
	Oldest bool
}

type RunListResult struct {
	Runs       []agentfleet.Run
	NextCursor string // empty on the last page
}

type RunTransitionParams struct {
	ID string
	// From lists the statuses the run must be in; empty means any
	// non-terminal status.
	From   []agentfleet.RunStatus
	To     agentfleet.RunStatus
	Error  string
	Answer json.RawMessage
	// IncrementWake bumps Run.Wake (when a parked run resumes).
	IncrementWake bool
	Events        []agentfleet.Event
}

// RunChangeResult is the run after a change, the events appended with
// their seq, and, when the change ended the run and its session has a
// queued run waiting, that run (now the session's head).
type RunChangeResult struct {
	Run    agentfleet.Run
	Events []agentfleet.Event
	// Steps are the steps a TurnCommit stored, as StepListByRun would
	// read them back (numbered, timestamped); nil for other changes. A
	// worker that runs the run's next turn at once builds that turn's
	// history from them instead of loading it.
	Steps       []agentfleet.Step
	SessionNext *agentfleet.Run
}

type RunFamilySettleParams struct {
	ID string
}

// RunFamilySettleResult is what a run's end changed in its family.
type RunFamilySettleResult struct {
	// Changes are the runs changed, with their events to publish: woken
	// parents, and children cancelled at once.
	Changes []RunChangeResult
	// Woken are the parents that resume: their next turn is due.
	Woken []agentfleet.Run
	// Stopping are running children asked to stop at their next turn
	// boundary (a worker running one stops it sooner when told).
	Stopping []agentfleet.Run
	// Released are queued runs of the ended run's batch released now
	// (its max_concurrent has room): their first turn is due.
	Released []agentfleet.Run
}

// Add appends o to r.
func (r *RunFamilySettleResult) Add(o RunFamilySettleResult) {
	r.Changes = append(r.Changes, o.Changes...)
	r.Woken = append(r.Woken, o.Woken...)
	r.Stopping = append(r.Stopping, o.Stopping...)
	r.Released = append(r.Released, o.Released...)
}

type RunFamilySettleDueParams struct {
	Now   time.Time
	Limit int // zero: 100
}

type RunCancelParams struct {
	ID     string
	Tenant string // scopes the lookup when set
	Reason string
	// Events are appended when the run is cancelled at once.
	Events []agentfleet.Event
}

type RunCancelResult struct {
	RunChangeResult
	// Immediate is true when the run is now cancelled; false when a
	// worker will stop it at the next turn boundary.
	Immediate bool
}

// ModelReply is the recorded model output of one turn.
type ModelReply struct {
	RunID         string
	Turn          int
	Content       string
	Model         string
	Usage         agentfleet.Usage
	UsageReported bool
	CreatedAt     time.Time
}

type ModelReplyRecordParams struct {
	ModelReply
	// Charge, when set, settles the model call's reservation in the
	// same transaction as the reply insert (see ModelReplyRecord).
	Charge *BudgetSettleParams
}

type ModelReplyRecordResult struct {
	Reply   ModelReply
	Existed bool
	// Settled is the charge's outcome, when Charge was set and applied
	// (err nil, Existed false, ChargeErr nil); zero otherwise.
	Settled BudgetSettleResult
	// ChargeErr says why a Charge was not applied although this call
	// recorded the reply: ErrNotFound when the reservation is gone
	// (settled, released or expired) or, for an empty ReservationID,
	// the tenant does not exist. The reply is recorded either way; the
	// caller charges by other means. Nil when charged, when Charge was
	// nil, and when Existed.
	ChargeErr error
}

type JournalRecordParams struct {
	agentfleet.JournalEntry
	// Charge, when set, settles the ai() call's reservation in the same
	// transaction as the insert (see JournalRecord).
	Charge *BudgetSettleParams
}

// JournalRecordResult is ModelReplyRecordResult's counterpart: the charge
// happened exactly when err == nil, !Existed and ChargeErr == nil.
type JournalRecordResult struct {
	Entry     agentfleet.JournalEntry
	Existed   bool
	Settled   BudgetSettleResult
	ChargeErr error
}

type JournalListByRunParams struct {
	RunID string
	// Turn, when positive, lists that turn's entries only.
	Turn int
}

// TurnCommitParams is one committed turn. Usage and DataBytesCarried are
// added to the run's totals. Status is the run's status after the turn
// (running to continue, or a terminal status with Answer or Error).
type TurnCommitParams struct {
	RunID            string
	Turn             int
	Steps            []agentfleet.Step
	Args             json.RawMessage
	Status           agentfleet.RunStatus
	Answer           json.RawMessage
	Error            string
	Usage            agentfleet.Usage
	DataBytesCarried int64
	Events           []agentfleet.Event
	// Spawned counts the children the turn's script spawned.
	Spawned int
	// WaitIDs, with Status waiting_children, are the children the run
	// waits for, until WaitUntil (zero: until they end). The commit
	// leaves the run running instead when every one has ended already.
	// The ids stay on the run until its next turn commits, which reads
	// the children's results.
	WaitIDs   []string
	WaitUntil time.Time
}

type StepListByRunParams struct {
	RunID    string
	FromTurn int // inclusive; zero: from the start
}

type EventAppendParams struct {
	RunID  string
	Events []agentfleet.Event
}

type EventListByRunParams struct {
	RunID    string
	AfterSeq int64
	Limit    int // zero: all
}

type BudgetReserveParams struct {
	Tenant string
	RunID  string
	Tokens int64
	Now    time.Time
	Lease  time.Duration
}

// BudgetSettleParams settles one model call. ReservationID names the
// reservation; when it is empty (an unlimited tenant's reservation),
// Tenant is required and the usage is charged to Tenant and RunID.
// Tenant and RunID are ignored when ReservationID is set (the
// reservation's own are used), so callers may always fill them in.
type BudgetSettleParams struct {
	ReservationID string
	Tenant        string
	RunID         string
	Usage         agentfleet.Usage
	Model         string
	Now           time.Time
}

type BudgetSettleResult struct {
	Charged int64
	Overage int64
}

// UsageListParams: GroupBy is "model" or "run".
type UsageListParams struct {
	Tenant  string
	RunID   string
	Since   time.Time
	GroupBy string
}

type UsageRow struct {
	Key   string // the model or the run id
	Usage agentfleet.Usage
	Calls int64
}

// ApprovalStatus is where an approval stands.
type ApprovalStatus = agentfleet.ApprovalState

const (
	ApprovalPending  = agentfleet.ApprovalPending
	ApprovalApproved = agentfleet.ApprovalApproved
	ApprovalDenied   = agentfleet.ApprovalDenied
)

// ApprovalScope is what an approval covers: its one call (to its
// digest), or calls of the same method and URL (and primitive, fetch
// and http being one) for the rest of the run's session.
type ApprovalScope string

const (
	ApprovalScopeCall    ApprovalScope = "call"
	ApprovalScopeSession ApprovalScope = "session"
)

// Reasons and decider of the approvals the store denies itself.
const (
	ApprovalExpired  = "expired"
	ApprovalRunEnded = "run ended"
	ApprovalBySystem = "system"
)

// Approval is one call of a run's turn that needs a person's yes.
type Approval struct {
	ID        string
	Tenant    string
	RunID     string
	SessionID string
	Turn      int
	agentfleet.ApprovalCall
	Status    ApprovalStatus
	Reason    string
	Scope     ApprovalScope
	DecidedBy string
	CreatedAt time.Time
	DecidedAt time.Time // zero while pending
	ExpiresAt time.Time
	// Notify* is the approval's notification to the agent's
	// approval_callback_url; NotifyState is empty when there is none.
	NotifyURL      string
	NotifyState    CallbackState
	NotifyAttempts int
	NotifyNextAt   time.Time
	NotifyError    string
}

// ApprovalRequestParams parks run RunID, at turn Turn (not committed
// yet), on Call. Timeout is how long the approval waits (zero:
// agentfleet.ApprovalTimeoutDefault); NotifyURL, when set, is notified.
type ApprovalRequestParams struct {
	RunID     string
	Turn      int
	Call      agentfleet.ApprovalCall
	Timeout   time.Duration
	NotifyURL string
	Now       time.Time
}

type ApprovalRequestResult struct {
	Approval Approval
	// Parked: the run waits for Approval; Change has its event. Else the
	// approval was decided already and Change.Run is the run, running,
	// whose turn is due again.
	Parked bool
	Change RunChangeResult
}

type ApprovalGetForCallParams struct {
	RunID     string
	SessionID string
	Tenant    string
	Turn      int
	Call      agentfleet.ApprovalCall
}

type ApprovalGetByIDParams struct {
	ID     string
	Tenant string
}

// ApprovalListParams filters and pages approvals, newest first. An empty
// Tenant lists every tenant's (the admin).
type ApprovalListParams struct {
	Tenant string
	Status ApprovalStatus
	RunID  string
	Limit  int // zero: 50
	Cursor string
}

type ApprovalListResult struct {
	Approvals  []Approval
	NextCursor string // empty on the last page
}

// ApprovalDecideParams decides approval ID; a non-empty Tenant scopes
// the lookup. Scope empty is ApprovalScopeCall.
type ApprovalDecideParams struct {
	ID        string
	Tenant    string
	Approve   bool
	Reason    string
	DecidedBy string
	Scope     ApprovalScope
	Now       time.Time
}

type ApprovalDecideResult struct {
	Approval Approval
	// Change is the run after the decision, with its event.
	Change RunChangeResult
	// Woken: the run waited for this approval and resumes; its next
	// turn is due.
	Woken bool
}

type ApprovalExpireParams struct {
	Now   time.Time
	Limit int // zero: 100
}

type ApprovalNotifyClaimParams struct {
	Now   time.Time
	Limit int
	Lease time.Duration
}

// ApprovalNotifyRecordParams records a notification attempt: State
// delivered or failed ends it; pending tries again at NextAt.
type ApprovalNotifyRecordParams struct {
	ID     string
	State  CallbackState
	NextAt time.Time
	Error  string
}

// BatchStatus is where a batch stands. A batch being admitted is
// invisible; it runs until every run has ended (completed), or was
// cancelled.
type BatchStatus string

const (
	BatchRunning   BatchStatus = "running"
	BatchCompleted BatchStatus = "completed"
	BatchCancelled BatchStatus = "cancelled"
)

// Batch is many runs admitted at once, one per input, their results
// gathered in input order.
type Batch struct {
	ID     string
	Tenant string
	Agent  string
	Status BatchStatus
	Total  int
	// MaxConcurrent caps the batch's runs in flight (0: no cap);
	// Released is how many of its runs, in input order, may have started.
	MaxConcurrent  int
	Released       int
	MaxTurns       int
	MaxTokens      int64
	Metadata       map[string]string
	IdempotencyKey string
	CallbackURL    string
	// RetryOf is the batch whose failed inputs this one submits again.
	RetryOf    string
	CreatedAt  time.Time
	FinishedAt time.Time // zero until every run has ended
	// Counts and Usage are filled by BatchGetByID: the runs by status
	// and their summed usage.
	Counts map[agentfleet.RunStatus]int
	Usage  agentfleet.Usage
}

// BatchAdmitParams starts a batch's admission. ID is generated (UUIDv7)
// when empty. Agent, MaxTurns and MaxTokens apply to every input.
type BatchAdmitParams struct {
	ID             string
	Tenant         string
	Agent          string
	MaxConcurrent  int
	MaxTurns       int
	MaxTokens      int64
	Metadata       map[string]string
	IdempotencyKey string
	CallbackURL    string
	RetryOf        string
}

type BatchAdmitResult struct {
	// Admission is the batch being admitted; nil with Existing.
	Admission BatchAdmission
	// Existing is the batch admitted before with the same idempotency
	// key.
	Existing *Batch
}

// BatchInput is one input of a batch: one run. Index is its 0-based
// position; inputs are appended in order.
type BatchInput struct {
	Index          int
	CustomID       string
	Message        string
	Context        json.RawMessage
	Metadata       map[string]string
	SessionID      string
	IdempotencyKey string
}

// BatchInputError is an input the store refused: Err is ErrInvalid, or
// ErrConflict for an idempotency key of another run (or of an earlier
// input of the batch).
type BatchInputError struct {
	Index int
	Err   error
	Msg   string
}

func (e *BatchInputError) Error() string { return fmt.Sprintf("input %d: %s", e.Index, e.Msg) }
func (e *BatchInputError) Unwrap() error { return e.Err }

// BatchAdmission is one batch's admission in progress. It is not safe
// for concurrent use; Commit or Abort ends it.
type BatchAdmission interface {
	// Append stores inputs (at most BatchChunkMax) as runs of the batch.
	// A refused input is a *BatchInputError; the caller then aborts.
	Append(ctx context.Context, inputs []BatchInput) error
	// Commit makes the batch and its runs visible, all queued, the first
	// min(total, MaxConcurrent) released (all without a cap), with each
	// run's queued event (seq 1) stored. The batch-wide settings known
	// only after the inputs are given here.
	Commit(ctx context.Context, p BatchCommitParams) (Batch, error)
	// Abort removes what was written. It is safe after a failed Commit
	// and a no-op after a successful one.
	Abort(ctx context.Context) error
}

// BatchQueuedEvent is a batch run's queued event (seq 1): what
// BatchAdmission stores for each run, and what the caller publishes after
// the commit, built again from the run rather than read back.
func BatchQueuedEvent(r agentfleet.Run) agentfleet.Event {
	return agentfleet.Event{V: agentfleet.EventVersion, RunID: r.ID, Tenant: r.Tenant, SessionID: r.SessionID, Seq: 1,
		Type: agentfleet.EventQueued, TS: r.CreatedAt, Content: r.Message, Summary: "agent " + r.Agent + ", batch " + r.BatchID}
}

// BatchChunkMax bounds one Append: on SQLite one chunk is one write
// transaction, so the one writer is never held for long.
const BatchChunkMax = 2000

type BatchCommitParams struct {
	MaxConcurrent int
	Metadata      map[string]string
	CallbackURL   string
}

type BatchGetByIDParams struct {
	ID     string
	Tenant string
}

type BatchListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type BatchListResult struct {
	Batches    []Batch
	NextCursor string // empty on the last page
}

type BatchRunListParams struct {
	ID         string
	AfterIndex int // -1: from the first input
	Limit      int // zero: 1,000
	// Status, when set, reads only runs in these statuses.
	Status []agentfleet.RunStatus
}

// BatchRun is one input's run, with its position.
type BatchRun struct {
	Index    int
	CustomID string
	Run      agentfleet.Run
}

type BatchCancelParams struct {
	ID     string
	Tenant string
	Limit  int // zero: 500
}

type BatchCancelResult struct {
	Batch Batch
	// Cancelled are the runs cancelled at once, with their events;
	// Stopping the running ones asked to stop at their next turn.
	Cancelled []RunCancelResult
	Stopping  []agentfleet.Run
	More      bool
}

type BatchSweepParams struct {
	Now   time.Time
	Limit int // zero: 100 batches
}

type BatchSweepResult struct {
	// Released are queued runs released now: their first turn is due.
	Released []agentfleet.Run
	// Finished are the batches that finished now.
	Finished []Batch
}

// Trigger turns signed webhook deliveries into runs. Message and
// SessionID are templates; Secret and PrevSecret are kept as given (the
// API seals them), never read by the store.
type Trigger struct {
	ID              string
	Tenant          string
	Name            string
	Agent           string
	Scheme          string
	Message         string
	SessionID       string
	Events          []string
	Secret          string
	PrevSecret      string
	PrevSecretUntil time.Time
	MaxTurns        int
	MaxTokens       int64
	MaxBodyBytes    int64
	Enabled         bool
	CallbackURL     string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// TriggerCreateParams creates a trigger. ID is generated (UUIDv7) when
// empty.
type TriggerCreateParams struct {
	ID           string
	Tenant       string
	Name         string
	Agent        string
	Scheme       string
	Message      string
	SessionID    string
	Events       []string
	Secret       string
	MaxTurns     int
	MaxTokens    int64
	MaxBodyBytes int64
	Enabled      bool
	CallbackURL  string
}

// TriggerGetByIDParams reads a trigger; a non-empty Tenant scopes the
// lookup, so another tenant's trigger is ErrNotFound.
type TriggerGetByIDParams struct {
	ID     string
	Tenant string
}

type TriggerListParams struct {
	Tenant string
	Limit  int // zero: 50
	Cursor string
}

type TriggerListResult struct {
	Triggers   []Trigger
	NextCursor string // empty on the last page
}

// TriggerUpdateParams changes the set fields of a tenant's trigger.
type TriggerUpdateParams struct {
	ID           string
	Tenant       string
	Name         *string
	Agent        *string
	Message      *string
	SessionID    *string
	Events       *[]string
	MaxTurns     *int
	MaxTokens    *int64
	MaxBodyBytes *int64
	Enabled      *bool
	CallbackURL  *string
	// Secret replaces the secret; the replaced one becomes PrevSecret,
	// accepted until PrevSecretUntil.
	Secret          *string
	PrevSecretUntil time.Time
}

type TriggerDeleteParams struct {
	ID     string
	Tenant string
}

// DeliveryOutcome is what the intake did with a delivery.
type DeliveryOutcome string

const (
	DeliveryAccepted  DeliveryOutcome = "accepted"  // a run was created
	DeliveryDuplicate DeliveryOutcome = "duplicate" // a retry: the first run's id answered
	DeliveryIgnored   DeliveryOutcome = "ignored"   // a ping, or an event the trigger does not take
	DeliveryRejected  DeliveryOutcome = "rejected"  // bad signature, stale timestamp, or no room
	DeliveryFailed    DeliveryOutcome = "failed"    // signed, but no run could be made of it
)

// TriggerDelivery is one line of a trigger's delivery log.
type TriggerDelivery struct {
	ID         string
	TriggerID  string
	Delivery   string
	ReceivedAt time.Time
	Event      string
	Action     string
	Outcome    DeliveryOutcome
	Reason     string
	RunID      string
	// Payload is kept only for deliveries that may be redelivered but
	// made no run (rejected for want of room), and read back only by a
	// listing filtered by Delivery.
	Payload json.RawMessage
}

// TriggerDeliveryRecordParams appends log lines (their ID is generated;
// a zero ReceivedAt means now). Keep is how many lines each trigger
// keeps (zero: 1,000).
type TriggerDeliveryRecordParams struct {
	Lines []TriggerDelivery
	Keep  int
}

// TriggerDeliveryListParams pages a trigger's log, newest first; a
// non-empty Delivery lists only that delivery's lines, with payloads.
type TriggerDeliveryListParams struct {
	TriggerID string
	Delivery  string
	Limit     int // zero: 50
	Cursor    string
}

type TriggerDeliveryListResult struct {
	Deliveries []TriggerDelivery
	NextCursor string // empty on the last page
}

// TriggerDigestWindowDefault is how long a body digest's claim holds.
const TriggerDigestWindowDefault = 72 * time.Hour

// DigestClaim is one delivery's claim of its body's digest (SHA-256, 32
// bytes) in its trigger.
type DigestClaim struct {
	TriggerID string
	Digest    []byte
	Delivery  string
}

// TriggerDigestClaimParams claims digests at At (zero: now) for Window
// (zero: TriggerDigestWindowDefault).
type TriggerDigestClaimParams struct {
	Claims []DigestClaim
	Window time.Duration
	At     time.Time
}

type TenantCallbackSecretSetParams struct {
	Tenant string
	Secret string // sealed
}

// CallbackState is where a run's callback stands.
type CallbackState string

const (
	CallbackPending   CallbackState = "pending"   // not sent yet, or to be tried again
	CallbackDelivered CallbackState = "delivered" // the receiver answered 2xx
	CallbackFailed    CallbackState = "failed"    // given up on
)

// CallbackLogMax is how many attempts a callback's log keeps.
const CallbackLogMax = 20

// CallbackAttempt is one POST of a run's callback.
type CallbackAttempt = wire.CallbackAttempt

// RunCallback is a run's completion callback: the outbox row the
// dispatcher drains.
type RunCallback struct {
	RunID     string
	Tenant    string
	URL       string
	State     CallbackState
	Attempts  int
	Log       []CallbackAttempt // the last attempts, oldest first
	NextAt    time.Time
	FirstAt   time.Time // the first attempt; zero before it
	CreatedAt time.Time
	UpdatedAt time.Time
}

type RunCallbackCreateParams struct {
	RunID  string
	Tenant string
	URL    string
}

type RunCallbackClaimParams struct {
	Now   time.Time
	Limit int
	Lease time.Duration
}

type RunCallbackRecordParams struct {
	RunID   string
	Attempt CallbackAttempt
	State   CallbackState
	// NextAt is the next attempt, for a pending callback.
	NextAt time.Time
}

// Skill is a named, reusable piece of script a tenant's agents can load.
type Skill struct {
	Tenant      string
	Name        string
	Description string
	Code        string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

type SkillUpsertParams struct {
	Tenant      string
	Name        string
	Description string
	Code        string
}

// SessionNext finds the run of a session that may start next: its oldest
// queued run, when no other run of it is active (running or waiting).
// Nil when there is none. A worker asks it when a session run ends; the
// dispatcher, of a queued session run that may have been stranded.
func SessionNext(ctx context.Context, s Store, tenant, sessionID string) (*agentfleet.Run, error) {
	active, err := s.RunList(ctx, RunListParams{
		Tenant: tenant, SessionID: sessionID, Limit: 1,
		Status: []agentfleet.RunStatus{agentfleet.StatusRunning, agentfleet.StatusWaitingBudget,
			agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren},
	})
	if err != nil {
		return nil, fmt.Errorf("list active runs of session: %w", err)
	}
	if len(active.Runs) > 0 {
		return nil, nil
	}
	queued, err := s.RunList(ctx, RunListParams{
		Tenant: tenant, SessionID: sessionID, Limit: 1, Oldest: true,
		Status: []agentfleet.RunStatus{agentfleet.StatusQueued},
	})
	if err != nil {
		return nil, fmt.Errorf("list queued runs of session: %w", err)
	}
	if len(queued.Runs) == 0 {
		return nil, nil
	}
	return &queued.Runs[0], nil
}

// RunDeleteEndedParams selects ended runs to delete. EndedBefore is
// required; Limit (1 to RunDeleteEndedLimitMax) bounds one transaction.
type RunDeleteEndedParams struct {
	EndedBefore time.Time
	Limit       int
}

// RunDeleteEndedLimitMax bounds RunDeleteEndedParams.Limit: a delete
// holds its transaction (on SQLite, the one writer) for its whole
// length.
const RunDeleteEndedLimitMax = 10_000

// RunDeleteParams names a run to delete; a non-empty Tenant scopes the
// lookup, so another tenant's run is ErrNotFound.
type RunDeleteParams struct {
	ID     string
	Tenant string
}
