package rules

// Statements both backends run as they are: their text is the same in
// both schemas, with PostgreSQL's numbered parameters ($1, $2, ...), which
// modernc.org/sqlite binds by number too ($N is argument N, however often
// and in whatever order it appears). A backend passes the arguments in
// its own encoding (SQLite's timestamps as microseconds). What differs
// between the two (locking clauses, collations, arrays against JSON) stays
// in each backend's SQL.

// TerminalSQL and UnfinishedSQL are the lists (SQLList) of the Terminal
// and the Unfinished statuses.
var (
	TerminalSQL   = SQLList(Terminal)
	UnfinishedSQL = SQLList(Unfinished)
)

// Runs.

const (
	// RunUpdateSQL writes the mutable columns a transition or a cancel
	// changes: $1 id, $2 status, $3 error, $4 answer, $5 wake, $6 event
	// seq, $7 cancel requested, $8 its reason, $9 updated at.
	RunUpdateSQL = `UPDATE runs SET status = $2, error = $3, answer = $4, wake = $5, event_seq = $6,
			cancel_requested = $7, cancel_reason = $8, updated_at = $9
		WHERE id = $1 RETURNING ` + RunCols
	// StepsSQL lists run $1's steps of turns [$2, $3) in order.
	StepsSQL = `SELECT ` + StepCols + ` FROM steps WHERE run_id = $1 AND turn >= $2 AND turn < $3 ORDER BY turn, idx`
	// EventListSQL lists run $1's events after seq $2, at most $3 (the
	// backend's "no limit").
	EventListSQL = `SELECT ` + EventCols + `
		FROM events e JOIN runs r ON r.id = e.run_id
		WHERE e.run_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`
	// RunChildrenUsageSQL sums the usage of every run below run $1.
	RunChildrenUsageSQL = `WITH RECURSIVE d(id) AS (
			SELECT id FROM runs WHERE parent_run_id = $1 AND parent_run_id <> ''
			UNION ALL
			SELECT r.id FROM runs r JOIN d ON r.parent_run_id = d.id WHERE r.parent_run_id <> ''
		)
		SELECT COALESCE(sum(prompt_tokens), 0), COALESCE(sum(completion_tokens), 0) FROM runs WHERE id IN (SELECT id FROM d)`
)

var (
	// SessionHeadSQL reads the oldest unfinished run of session $2 of
	// tenant $1. It repeats the session index's predicate (a non-empty
	// session), which is what lets SQLite use that partial index.
	SessionHeadSQL = `SELECT ` + RunCols + ` FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> ''
		AND status NOT IN (` + TerminalSQL + `) ORDER BY seq LIMIT 1`
	// OrphanedSQL finds up to $1 ended runs with children not yet ended.
	OrphanedSQL = `SELECT DISTINCT p.id FROM runs c JOIN runs p ON p.id = c.parent_run_id
	WHERE ` + OpenChildren("c.") + ` AND NOT c.cancel_requested AND p.status IN (` + TerminalSQL + `) LIMIT $1`
)

// Sessions: the runs of tenant $1's session ids, the session index's
// predicate repeated (a non-empty session) and a batch's runs being
// admitted left out.

const sessionRunsWhere = `tenant = $1 AND session_id <> '' AND status <> '` + BatchAdmitting + `'`

// sessionAgg aggregates sessions s from their runs; SessionCols reads
// them joined to their latest run r.
const (
	sessionAgg = `SELECT session_id, count(*) AS runs, max(seq) AS last_seq,
			COALESCE(sum(prompt_tokens), 0) AS pt, COALESCE(sum(completion_tokens), 0) AS ct,
			min(created_at) AS created_at, max(updated_at) AS updated_at
		FROM runs WHERE ` + sessionRunsWhere
	SessionCols = `s.session_id, r.tenant, r.agent, s.runs, r.id, r.status, s.pt, s.ct, s.created_at, s.updated_at`
)

// SessionListSQL pages tenant $1's sessions whose latest run is of agent
// $2 (any when empty), updated before ($3, $4), at most $5; collate makes
// the id comparison bytewise where the column's collation is not.
func SessionListSQL(collate string) string {
	return `WITH s AS (` + sessionAgg + ` GROUP BY session_id)
	SELECT ` + SessionCols + ` FROM s JOIN runs r ON r.seq = s.last_seq
	WHERE ($2 = '' OR r.agent = $2) AND (s.updated_at < $3 OR (s.updated_at = $3 AND s.session_id` + collate + ` < $4))
	ORDER BY s.updated_at DESC, s.session_id` + collate + ` DESC LIMIT $5`
}

const (
	// SessionGetSQL reads tenant $1's session $2.
	SessionGetSQL = `WITH s AS (` + sessionAgg + ` AND session_id = $2 GROUP BY session_id)
	SELECT ` + SessionCols + ` FROM s JOIN runs r ON r.seq = s.last_seq`
	// SessionRunsSQL reads the latest $3 runs of tenant $1's session $2,
	// newest first.
	SessionRunsSQL = `SELECT ` + RunCols + ` FROM runs WHERE ` + sessionRunsWhere + ` AND session_id = $2 ORDER BY seq DESC LIMIT $3`
	// SessionStatusesSQL reads the id and status of each run of tenant
	// $1's session $2, oldest first.
	SessionStatusesSQL = `SELECT id, status FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> '' ORDER BY seq`
)

// SessionCheckpointSQL reads the newest summary step of tenant $1's
// session $2 through the steps_summary index (0018); hint is what pins
// the index where the planner would rather walk a run's every step.
func SessionCheckpointSQL(hint string) string {
	return `SELECT ` + PrefixCols("s.", StepCols) + ` FROM runs r JOIN steps s` + hint + ` ON s.run_id = r.id
		WHERE r.tenant = $1 AND r.session_id = $2 AND r.session_id <> '' AND s.kind = 'summary'
		ORDER BY r.seq DESC, s.turn DESC, s.idx DESC LIMIT 1`
}

var (
	// SessionDeleteEndedSQL deletes the ended runs of tenant $1's session
	// $2.
	SessionDeleteEndedSQL = `DELETE FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> '' AND status IN (` + TerminalSQL + `)`
)

// Agents.

const (
	// CurrentAgentSQL reads agents' current versions (a version kept past
	// its agent's delete is read from agent_versions v alone).
	CurrentAgentSQL = `SELECT ` + AgentCols + `, a.created_at FROM agents a
	JOIN agent_versions v ON v.tenant = a.tenant AND v.name = a.name AND v.version = a.version`
	// AgentVersionSQL reads version $3 of tenant $1's agent $2; the
	// agent's creation is its first version's.
	AgentVersionSQL = `SELECT ` + AgentCols + `, (SELECT MIN(created_at) FROM agent_versions f
		WHERE f.tenant = v.tenant AND f.name = v.name) FROM agent_versions v WHERE v.tenant = $1 AND v.name = $2 AND v.version = $3`
)

// Tenants, API keys, skills and callbacks.

const (
	// APIKeyListSQL pages tenant $1's keys before seq $2 (0: the first
	// page), at most $3.
	APIKeyListSQL = `SELECT ` + APIKeyCols + `, seq FROM api_keys WHERE tenant = $1 AND ($2 = 0 OR seq < $2)
		ORDER BY seq DESC LIMIT $3`
	// CallbackSecretUpsertSQL writes tenant $1's callback secret $2 at $3.
	CallbackSecretUpsertSQL = `INSERT INTO tenant_callback_secrets (tenant, secret, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (tenant) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at`
	// RunCallbackInsertSQL inserts run $1's pending callback (tenant $2,
	// URL $3) at $4.
	RunCallbackInsertSQL = `INSERT INTO run_callbacks (run_id, tenant, url, state, next_at, created_at, updated_at)
		VALUES ($1, $2, $3, 'pending', $4, $4, $4) RETURNING ` + CallbackCols
	// RunCallbackUpdateSQL records an attempt of run $1's callback: $2
	// state, $3 log, $4 next at, $5 first at, $6 now.
	RunCallbackUpdateSQL = `UPDATE run_callbacks SET state = $2, attempts = attempts + 1, attempt_log = $3,
			next_at = $4, first_at = COALESCE(first_at, $5), updated_at = $6
		WHERE run_id = $1 RETURNING ` + CallbackCols
	// TriggerInsertSQL inserts a trigger (no previous secret): TriggerCols'
	// first nine, then max_turns to callback_url ($10..$14), created and
	// updated at $15.
	TriggerInsertSQL = `INSERT INTO triggers (` + TriggerCols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '', NULL, $10, $11, $12, $13, $14, $15, $15) RETURNING ` + TriggerCols
)

// Approvals.

const (
	// ApprovalInsertSQL inserts an approval, its columns in order.
	ApprovalInsertSQL = `INSERT INTO approvals (id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview,
			digest, status, scope, created_at, expires_at, notify_url, notify_state, notify_next_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`
	// ApprovalListSQL pages approvals before seq $4 (0: the first page),
	// at most $5, of tenant $1, status $2 and run $3 where set.
	ApprovalListSQL = `SELECT ` + ApprovalCols + ` FROM approvals
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR status = $2) AND ($3 = '' OR run_id = $3) AND ($4 = 0 OR seq < $4)
		ORDER BY seq DESC LIMIT $5`
	// ApprovalNotifyUpdateSQL records a notification attempt of approval
	// $1: $2 state, $3 next at, $4 error.
	ApprovalNotifyUpdateSQL = `UPDATE approvals SET notify_state = $2, notify_attempts = notify_attempts + 1, notify_next_at = $3,
		notify_error = $4 WHERE id = $1`
)

// ApprovalListDueSQL lists up to $2 pending approvals expired at $1 or
// of runs that ended, and whether the run did.
var ApprovalListDueSQL = `SELECT a.id, r.status IN (` + TerminalSQL + `)
		FROM approvals a JOIN runs r ON r.id = a.run_id
		WHERE a.status = 'pending' AND (a.expires_at <= $1 OR r.status IN (` + TerminalSQL + `)) ORDER BY a.expires_at LIMIT $2`

// Batches.

// VisibleBatch is true of a batch whose admission committed.
const VisibleBatch = `status <> '` + BatchAdmitting + `'`

const (
	// BatchInsertSQL inserts an admitting batch: $1 id, $2 tenant, $3
	// agent, $4 status, $5 max concurrent, $6 max turns, $7 max tokens,
	// $8 metadata, $9 idempotency key, $10 callback URL, $11 retry of,
	// $12 created at.
	BatchInsertSQL = `INSERT INTO batches (id, tenant, agent, status, total, max_concurrent, max_turns, max_tokens,
		metadata, idempotency_key, callback_url, retry_of, created_at) VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $9, $10, $11, $12)`
	// BatchCommitSQL writes batch $1's admission: $2 status, $3 total, $4
	// released, $5 max concurrent, $6 metadata, $7 callback URL, $8
	// finished at.
	BatchCommitSQL = `UPDATE batches SET status = $2, total = $3, released = $4, max_concurrent = $5,
		metadata = $6, callback_url = $7, finished_at = $8 WHERE id = $1 RETURNING ` + BatchCols
	// BatchGetByKeySQL reads tenant $1's batch of idempotency key $2.
	BatchGetByKeySQL = `SELECT ` + BatchCols + ` FROM batches WHERE tenant = $1 AND idempotency_key = $2
		AND idempotency_key <> '' AND ` + VisibleBatch
	// BatchGetSQL reads batch $1, of tenant $2 when set.
	BatchGetSQL = `SELECT ` + BatchCols + ` FROM batches WHERE id = $1 AND ($2 = '' OR tenant = $2) AND ` + VisibleBatch
	// BatchListSQL pages tenant $1's batches before id $2 ('': the first
	// page), at most $3.
	BatchListSQL = `SELECT ` + BatchCols + ` FROM batches WHERE tenant = $1 AND ` + VisibleBatch + `
		AND ($2 = '' OR id < $2) ORDER BY id DESC LIMIT $3`
	// BatchCountRunsSQL counts batch $1's runs by status, with their usage.
	BatchCountRunsSQL = `SELECT status, count(*), COALESCE(sum(prompt_tokens), 0), COALESCE(sum(completion_tokens), 0)
		FROM runs WHERE batch_id = $1 AND batch_id <> '' GROUP BY status`
	// BatchCancelMarkSQL marks batch $1 (of tenant $2 when set) cancelled
	// if it runs.
	BatchCancelMarkSQL = `UPDATE batches SET status = CASE WHEN status = 'running' THEN 'cancelled' ELSE status END
		WHERE id = $1 AND ($2 = '' OR tenant = $2) AND ` + VisibleBatch + ` RETURNING ` + BatchCols
	// BatchRunIsHeldSQL: is run $1 a queued batch run its batch has not
	// released?
	BatchRunIsHeldSQL = `SELECT r.status = 'queued' AND r.batch_index >= b.released FROM runs r JOIN batches b ON b.id = r.batch_id
		WHERE r.id = $1 AND r.batch_id <> ''`
	// BatchListUnfinishedSQL lists up to $1 batches not finished.
	BatchListUnfinishedSQL = `SELECT ` + BatchCols + ` FROM batches WHERE finished_at IS NULL AND ` + VisibleBatch + ` ORDER BY id LIMIT $1`
	// BatchFinishSQL finishes batch $1 with status $2 at $3.
	BatchFinishSQL = `UPDATE batches SET status = $2, finished_at = $3 WHERE id = $1 RETURNING ` + BatchCols
)

var (
	// BatchRunListCancellableSQL lists up to $2 open runs of batch $1
	// not asked to cancel, in batch order.
	BatchRunListCancellableSQL = `SELECT id FROM runs WHERE batch_id = $1 AND ` + OpenBatchSQL("") + `
		AND NOT cancel_requested ORDER BY batch_index LIMIT $2`
	// BatchListOpenSQL lists up to $3 open runs of batch $1 from index
	// $2, in batch order.
	BatchListOpenSQL = `SELECT batch_index, custom_id, ` + RunCols + ` FROM runs WHERE batch_id = $1 AND ` + OpenBatchSQL("") + `
		AND batch_index >= $2 ORDER BY batch_index LIMIT $3`
	// BatchCountInFlightSQL counts batch $1's open runs it released
	// (index below $2).
	BatchCountInFlightSQL = `SELECT count(*) FROM runs WHERE batch_id = $1 AND ` + OpenBatchSQL("") + ` AND batch_index < $2`
	// BatchHasOpenSQL: has batch $1 an open run?
	BatchHasOpenSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE batch_id = $1 AND ` + OpenBatchSQL("") + `)`
)
