// Package store declares the store of record: tenants, API keys, agents,
// runs, the step trace and the side-effect journal, carried state, events
// (the outbox every published RunEvent comes from), the budget ledger,
// approvals, batches, triggers, callbacks, skills and tenants' secrets.
// Secrets reach it sealed (internal/secrets) and never leave it open:
// it stores, lists and reseals sealed values, and opens none.
//
// There are two backends behind the one Store interface: store/postgres
// (pgx v5, production) and store/sqlite (modernc.org/sqlite, the embedded
// default). Most of the interface is implemented once, in
// store/internal/rules, over the SQL primitives each backend exports as a
// store/driver.Driver (held to store/driver/drivertest); the rest each
// backend implements itself. Both are held to one contract suite,
// store/storetest; a change of behaviour starts there. Nothing outside
// internal/store sees a driver type, and callers branch only on the sentinel errors declared here, on
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
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
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
	// StatsReader reads the console's pictures (stats.go).
	StatsReader

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

	// SecretPut creates a tenant's secret (version 1) or replaces it
	// whole (version + 1, created kept); the tenant must exist
	// (ErrNotFound). Names are [a-z0-9_]{1,64}; hosts 1 to 32 bare host
	// names (lower-cased, each once; see agentfleet.Secret.Hosts), the
	// header a token and the format holds {value} and no control
	// character (ErrInvalid naming the field).
	SecretPut(ctx context.Context, p SecretPutParams) (agentfleet.Secret, error)
	// SecretGet and SecretList read secrets without their values
	// (SecretList by name, bytewise; an unknown tenant is ErrNotFound);
	// SecretDelete removes one. An unknown secret is ErrNotFound.
	SecretGet(ctx context.Context, tenant, name string) (agentfleet.Secret, error)
	SecretList(ctx context.Context, tenant string) ([]agentfleet.Secret, error)
	SecretDelete(ctx context.Context, tenant, name string) error
	// SecretSealedList reads a tenant's secrets with their sealed values,
	// by name, for the worker, which opens them; none (or an unknown
	// tenant) is empty.
	SecretSealedList(ctx context.Context, tenant string) ([]SealedSecret, error)
	// SealedList pages through every sealed value the store keeps (the
	// tenants' secrets, the triggers' current and previous secrets, the
	// callback secrets), and SealedReplace swaps one for its resealing:
	// together, a rekey. A reseal changes the value (and a secret's key
	// id), nothing else: no version, no updated time. SealedReplace of a
	// value gone is ErrNotFound, of one changed ErrConflict.
	SealedList(ctx context.Context, p SealedListParams) ([]Sealed, error)
	SealedReplace(ctx context.Context, p SealedReplaceParams) error

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

	// SkillPut creates a tenant's skill or replaces all of it but its
	// creation time; an unknown tenant is ErrNotFound, a name that
	// shadows a script global (agentfleet.CheckSkillName) or a body over
	// agentfleet.SkillBodyMaxBytes ErrInvalid. SkillGet and SkillList
	// (by name, bytewise, bodies included; an unknown tenant is
	// ErrNotFound) read them; SkillDelete removes one. An unknown skill
	// is ErrNotFound. Every put and delete moves the tenant's
	// SkillRevision on, in the same transaction.
	SkillPut(ctx context.Context, p SkillPutParams) (agentfleet.Skill, error)
	SkillGet(ctx context.Context, tenant, name string) (agentfleet.Skill, error)
	SkillList(ctx context.Context, tenant string) ([]agentfleet.Skill, error)
	SkillDelete(ctx context.Context, tenant, name string) error
	// SkillRevision is a tenant's skills revision: 0 before its first
	// skill write, one more at each. A worker's index of the tenant's
	// skills reads it each turn (one primary-key read) and rebuilds
	// when it moved.
	SkillRevision(ctx context.Context, tenant string) (int64, error)

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
	// SessionList pages a tenant's sessions (SessionListParams): a
	// session is the runs of one session id, read from them.
	SessionList(ctx context.Context, p SessionListParams) (SessionListResult, error)
	// SessionGet reads a session with its runs and its latest
	// checkpoint; a session without runs is ErrNotFound.
	SessionGet(ctx context.Context, p SessionGetParams) (SessionDetail, error)
	// SessionDelete deletes a session's runs as RunDelete does, in one
	// transaction, and counts them. While one of them has not ended it
	// is ErrConflict and nothing is deleted; a session without runs is
	// ErrNotFound.
	SessionDelete(ctx context.Context, p SessionDeleteParams) (int, error)

	// RunDelete deletes one ended run the same way. A run that has not
	// ended is ErrConflict (cancel it first); an unknown run, or another
	// tenant's when Tenant is set, is ErrNotFound.
	RunDelete(ctx context.Context, p RunDeleteParams) error
}
