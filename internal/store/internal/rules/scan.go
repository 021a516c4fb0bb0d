package rules

import (
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// The column lists of the store's rows, in the order Scans reads them.
// Both schemas name and order the columns alike; only their types differ.
const (
	RunCols = `seq, id, tenant, agent, session_id, status, message, context, metadata, idempotency_key, batch_id,
	max_turns, max_tokens, deadline, turn, args, answer, error, prompt_tokens, completion_tokens, data_bytes_carried,
	event_seq, cancel_requested, cancel_reason, wake, created_at, updated_at, parent_run_id, depth, children, wait_ids, wait_until, agent_version`
	ReplyCols = `run_id, turn, content, model, prompt_tokens, completion_tokens, usage_reported, created_at`
	StepCols  = `run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at`
	// EventCols reads events e joined to their runs r.
	EventCols = `e.run_id, r.tenant, r.session_id, e.seq, e.v, e.turn, e.type, e.ts, e.content, e.args,
			e.tokens_prompt, e.tokens_completion, e.summary`
	JournalCols = `run_id, turn, idx, primitive, method, url, result, error, prompt_tokens, completion_tokens, created_at`
	TenantCols  = `id, token_limit, budget_window, tokens_per_minute, max_concurrent_runs, max_queued_runs, weight, exhausted, created_at, updated_at`
	APIKeyCols  = `id, tenant, name, scopes, created_at, last_used_at`
	// AgentCols reads a version (v); Scans.Agent reads its agent's
	// creation time after it.
	AgentCols   = `v.tenant, v.name, v.version, v.spec, v.created_at`
	TriggerCols = `id, tenant, name, agent, scheme, message, session_id, events, secret, prev_secret, prev_secret_until,
	max_turns, max_tokens, max_body_bytes, enabled, callback_url, created_at, updated_at`
	// DeliveryCols is followed by the payload (or NULL) in every read.
	DeliveryCols = `id, trigger_id, delivery, received_at, event, action, outcome, reason, run_id, n`
	ApprovalCols = `seq, id, tenant, run_id, session_id, turn, call_index, primitive, method, url, preview, status, reason, scope,
	decided_by, created_at, decided_at, expires_at, notify_url, notify_state, notify_attempts, notify_next_at, notify_error, digest`
	CallbackCols = `run_id, tenant, url, state, attempts, attempt_log, next_at, first_at, created_at, updated_at`
	BatchCols    = `id, tenant, agent, status, total, max_concurrent, released, max_turns, max_tokens, metadata,
	idempotency_key, callback_url, retry_of, created_at, finished_at`
	LedgerCols = `id, token_limit, budget_window, used, reserved, window_start, window_end, tokens_per_minute, minute_start, minute_used`
)

// PrefixCols qualifies a column list with a table alias.
func PrefixCols(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// NumberParams turns the "?" parameters of q into Postgres's $1, $2, ...
// q must hold no other "?".
func NumberParams(q string) string {
	var b strings.Builder
	n := 0
	for {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		n++
		b.WriteString(q[:i])
		b.WriteString("$" + strconv.Itoa(n))
		q = q[i+1:]
	}
}

// OpenChildren repeats runs_open_children's predicate for the runs table
// under alias a ("" for none), so the index serves it.
func OpenChildren(a string) string {
	return a + `parent_run_id <> '' AND ` + a + `status NOT IN ('completed','failed','cancelled','max_turns')`
}

// Scanner is a row to scan: *sql.Row or *sql.Rows, pgx.Row or pgx.Rows.
// An alias, so that a backend's scan functions of any spelling of it are
// of one type.
type Scanner = interface{ Scan(dest ...any) error }

// Scans reads the store's rows, written once over a backend's encoding
// of timestamps. Everything else scans alike in both: JSON and bytes into
// []byte, a nullable column into a pointer, SQLite's 0/1 into a bool.
type Scans struct {
	// Time is the scan destination of a timestamp column into t: set in
	// UTC, the zero time for NULL.
	Time func(t *time.Time) any
}

// Run scans RunCols, after any extra leading columns.
func (s Scans) Run(sc Scanner, extra ...any) (RunRow, error) {
	var r RunRow
	var ctxJSON, meta, args, answer, waitIDs []byte
	t := s.Time
	err := sc.Scan(append(extra, &r.Seq, &r.ID, &r.Tenant, &r.Agent, &r.SessionID, &r.Status, &r.Message, &ctxJSON, &meta,
		&r.IdempotencyKey, &r.BatchID, &r.MaxTurns, &r.MaxTokens, t(&r.Deadline), &r.Turn, &args, &answer, &r.Error,
		&r.Usage.PromptTokens, &r.Usage.CompletionTokens, &r.DataBytesCarried, &r.EventSeq, &r.CancelRequested,
		&r.CancelReason, &r.Wake, t(&r.CreatedAt), t(&r.UpdatedAt), &r.ParentRunID, &r.Depth, &r.Children, &waitIDs, t(&r.WaitUntil),
		&r.AgentVersion)...)
	if err != nil {
		return r, err
	}
	r.Context, r.Args, r.Answer = RawOrNil(ctxJSON), RawOrNil(args), RawOrNil(answer)
	if r.WaitIDs, err = DecodeStrings(waitIDs); err != nil {
		return r, err
	}
	r.Metadata, err = DecodeMetadata(meta)
	return r, err
}

// RunRow scans RunCols alone: Run as one and all take it.
func (s Scans) RunRow(sc Scanner) (RunRow, error) { return s.Run(sc) }

// Reply scans ReplyCols, then any extra trailing columns.
func (s Scans) Reply(sc Scanner, extra ...any) (store.ModelReply, error) {
	var m store.ModelReply
	err := sc.Scan(append([]any{&m.RunID, &m.Turn, &m.Content, &m.Model, &m.Usage.PromptTokens, &m.Usage.CompletionTokens,
		&m.UsageReported, s.Time(&m.CreatedAt)}, extra...)...)
	return m, err
}

// ReplyRow scans ReplyCols alone.
func (s Scans) ReplyRow(sc Scanner) (store.ModelReply, error) { return s.Reply(sc) }

// Step scans StepCols.
func (s Scans) Step(sc Scanner) (agentfleet.Step, error) {
	var x agentfleet.Step
	err := sc.Scan(&x.RunID, &x.Turn, &x.Index, &x.Kind, &x.Content, &x.Model, &x.Usage.PromptTokens, &x.Usage.CompletionTokens,
		s.Time(&x.CreatedAt))
	return x, err
}

// Event scans EventCols.
func (s Scans) Event(sc Scanner) (agentfleet.Event, error) {
	var e agentfleet.Event
	var args []byte
	var tp, tc *int64
	if err := sc.Scan(&e.RunID, &e.Tenant, &e.SessionID, &e.Seq, &e.V, &e.Turn, &e.Type, s.Time(&e.TS), &e.Content, &args,
		&tp, &tc, &e.Summary); err != nil {
		return e, err
	}
	e.Args = RawOrNil(args)
	if tp != nil || tc != nil {
		e.Tokens = &agentfleet.Tokens{}
		if tp != nil {
			e.Tokens.Prompt = *tp
		}
		if tc != nil {
			e.Tokens.Completion = *tc
		}
	}
	return e, nil
}

// Journal scans JournalCols, then any extra trailing columns.
func (s Scans) Journal(sc Scanner, extra ...any) (agentfleet.JournalEntry, error) {
	var e agentfleet.JournalEntry
	var result *string
	err := sc.Scan(append([]any{&e.RunID, &e.Turn, &e.Index, &e.Primitive, &e.Method, &e.URL, &result, &e.Error,
		&e.Usage.PromptTokens, &e.Usage.CompletionTokens, s.Time(&e.CreatedAt)}, extra...)...)
	if result != nil {
		e.Result = []byte(*result)
	}
	return e, err
}

// JournalRow scans JournalCols alone.
func (s Scans) JournalRow(sc Scanner) (agentfleet.JournalEntry, error) { return s.Journal(sc) }

// Tenant scans TenantCols, then any extra trailing columns.
func (s Scans) Tenant(sc Scanner, extra ...any) (agentfleet.Tenant, error) {
	var t agentfleet.Tenant
	err := sc.Scan(append([]any{&t.ID, &t.TokenLimit, &t.Window, &t.TokensPerMinute, &t.MaxConcurrentRuns, &t.MaxQueuedRuns,
		&t.Weight, &t.Exhausted, s.Time(&t.CreatedAt), s.Time(&t.UpdatedAt)}, extra...)...)
	return t, err
}

// TenantRow scans TenantCols alone.
func (s Scans) TenantRow(sc Scanner) (agentfleet.Tenant, error) { return s.Tenant(sc) }

// APIKeyScan is APIKeyCols as scanned (Dest); Key is the record.
type APIKeyScan struct {
	k      store.APIKey
	scopes string
}

// Dest is where APIKeyCols scan to.
func (r *APIKeyScan) Dest(s Scans) []any {
	return []any{&r.k.ID, &r.k.Tenant, &r.k.Name, &r.scopes, s.Time(&r.k.CreatedAt), s.Time(&r.k.LastUsedAt)}
}

// Key is the key scanned.
func (r *APIKeyScan) Key() store.APIKey {
	k := r.k
	k.Scopes = DecodeAPIKeyScopes(r.scopes)
	return k
}

// APIKey scans APIKeyCols.
func (s Scans) APIKey(sc Scanner) (store.APIKey, error) {
	var r APIKeyScan
	err := sc.Scan(r.Dest(s)...)
	return r.Key(), err
}

// APIKeyRow scans APIKeyCols and the key's seq.
func (s Scans) APIKeyRow(sc Scanner) (driver.APIKeyRow, error) {
	var r APIKeyScan
	var seq int64
	err := sc.Scan(append(r.Dest(s), &seq)...)
	return driver.APIKeyRow{Key: r.Key(), Seq: seq}, err
}

// TenantByAPIKey scans TenantCols and then APIKeyCols.
func (s Scans) TenantByAPIKey(sc Scanner) (store.TenantGetByAPIKeyResult, error) {
	var k APIKeyScan
	t, err := s.Tenant(sc, k.Dest(s)...)
	return store.TenantGetByAPIKeyResult{Tenant: t, Key: k.Key()}, err
}

// Agent scans AgentCols and the agent's creation time.
func (s Scans) Agent(sc Scanner) (agentfleet.Agent, error) {
	var a agentfleet.Agent
	var spec []byte
	if err := sc.Scan(&a.Tenant, &a.Name, &a.Version, &spec, s.Time(&a.UpdatedAt), s.Time(&a.CreatedAt)); err != nil {
		return a, err
	}
	var err error
	a.AgentSpec, err = DecodeAgentSpec(spec)
	return a, err
}

// Trigger scans TriggerCols.
func (s Scans) Trigger(sc Scanner) (store.Trigger, error) {
	var t store.Trigger
	var events []byte
	err := sc.Scan(&t.ID, &t.Tenant, &t.Name, &t.Agent, &t.Scheme, &t.Message, &t.SessionID, &events, &t.Secret, &t.PrevSecret,
		s.Time(&t.PrevSecretUntil), &t.MaxTurns, &t.MaxTokens, &t.MaxBodyBytes, &t.Enabled, &t.CallbackURL,
		s.Time(&t.CreatedAt), s.Time(&t.UpdatedAt))
	if err != nil {
		return t, err
	}
	t.Events, err = DecodeStrings(events)
	return t, err
}

// Delivery scans DeliveryCols and the payload; an empty payload is none.
func (s Scans) Delivery(sc Scanner) (driver.DeliveryRow, error) {
	var r driver.DeliveryRow
	var payload []byte // not json.RawMessage: database/sql scans NULL into []byte alone
	l := &r.Line
	err := sc.Scan(&l.ID, &l.TriggerID, &l.Delivery, s.Time(&l.ReceivedAt), &l.Event, &l.Action, &l.Outcome, &l.Reason, &l.RunID,
		&r.N, &payload)
	if len(payload) > 0 {
		l.Payload = payload
	}
	return r, err
}

// ApprovalRow scans ApprovalCols.
func (s Scans) ApprovalRow(sc Scanner) (driver.ApprovalRow, error) {
	var r driver.ApprovalRow
	a, t := &r.Approval, s.Time
	err := sc.Scan(&r.Seq, &a.ID, &a.Tenant, &a.RunID, &a.SessionID, &a.Turn, &a.Index, &a.Primitive, &a.Method, &a.URL, &a.Preview,
		&a.Status, &a.Reason, &a.Scope, &a.DecidedBy, t(&a.CreatedAt), t(&a.DecidedAt), t(&a.ExpiresAt), &a.NotifyURL, &a.NotifyState,
		&a.NotifyAttempts, t(&a.NotifyNextAt), &a.NotifyError, &a.Digest)
	return r, err
}

// Approval scans ApprovalCols without the seq.
func (s Scans) Approval(sc Scanner) (store.Approval, error) {
	r, err := s.ApprovalRow(sc)
	return r.Approval, err
}

// Callback scans CallbackCols.
func (s Scans) Callback(sc Scanner) (store.RunCallback, error) {
	var c store.RunCallback
	var log []byte
	t := s.Time
	if err := sc.Scan(&c.RunID, &c.Tenant, &c.URL, &c.State, &c.Attempts, &log, t(&c.NextAt), t(&c.FirstAt), t(&c.CreatedAt),
		t(&c.UpdatedAt)); err != nil {
		return c, err
	}
	var err error
	c.Log, err = DecodeCallbackLog(log)
	return c, err
}

// Batch scans BatchCols.
func (s Scans) Batch(sc Scanner) (store.Batch, error) {
	var b store.Batch
	var meta []byte
	if err := sc.Scan(&b.ID, &b.Tenant, &b.Agent, &b.Status, &b.Total, &b.MaxConcurrent, &b.Released, &b.MaxTurns, &b.MaxTokens,
		&meta, &b.IdempotencyKey, &b.CallbackURL, &b.RetryOf, s.Time(&b.CreatedAt), s.Time(&b.FinishedAt)); err != nil {
		return b, err
	}
	var err error
	b.Metadata, err = DecodeMetadata(meta)
	return b, err
}

// BatchRun scans a run's batch_index and custom_id, then RunCols.
func (s Scans) BatchRun(sc Scanner) (store.BatchRun, error) {
	var br store.BatchRun
	row, err := s.Run(sc, &br.Index, &br.CustomID)
	br.Run = row.Run
	return br, err
}

// LedgerDest is where LedgerCols scan to, into l.
func (s Scans) LedgerDest(l *driver.Ledger) []any {
	return []any{&l.Tenant, &l.Limit, &l.Window, &l.Used, &l.Reserved, s.Time(&l.WindowStart), s.Time(&l.WindowEnd),
		&l.TokensPerMinute, s.Time(&l.MinuteStart), &l.MinuteUsed}
}

// Ledger scans any extra leading columns, then LedgerCols.
func (s Scans) Ledger(sc Scanner, extra ...any) (driver.Ledger, error) {
	var l driver.Ledger
	err := sc.Scan(append(extra, s.LedgerDest(&l)...)...)
	return l, err
}

// LedgerRow scans LedgerCols alone.
func (s Scans) LedgerRow(sc Scanner) (driver.Ledger, error) { return s.Ledger(sc) }

// Timestamp scans one timestamp column: the zero time for NULL.
func (s Scans) Timestamp(sc Scanner) (time.Time, error) {
	var t time.Time
	return t, sc.Scan(s.Time(&t))
}

// Rows is what Collect reads: *sql.Rows or pgx.Rows.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect scans every row of rows with scan; the caller closes rows. No
// rows is a nil slice, in both backends.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Scans of a few columns, alike in both backends.

// ScanString scans one text column.
func ScanString(sc Scanner) (string, error) {
	var v string
	return v, sc.Scan(&v)
}

// ScanInt scans one integer column.
func ScanInt(sc Scanner) (int, error) {
	var n int
	return n, sc.Scan(&n)
}

// ScanInt64 scans one bigint column.
func ScanInt64(sc Scanner) (int64, error) {
	var n int64
	return n, sc.Scan(&n)
}

// ScanBool scans one boolean column.
func ScanBool(sc Scanner) (bool, error) {
	var v bool
	return v, sc.Scan(&v)
}

// ScanBytes scans one bytes (or JSON) column.
func ScanBytes(sc Scanner) ([]byte, error) {
	var b []byte
	return b, sc.Scan(&b)
}

// ScanCount scans a key and its count.
func ScanCount(sc Scanner) (driver.Count, error) {
	var c driver.Count
	return c, sc.Scan(&c.Key, &c.N)
}

// ScanRunStatus scans a run's id and status.
func ScanRunStatus(sc Scanner) (driver.RunStatus, error) {
	var r driver.RunStatus
	return r, sc.Scan(&r.ID, &r.Status)
}

// ScanUsage scans prompt and completion tokens.
func ScanUsage(sc Scanner) (agentfleet.Usage, error) {
	var u agentfleet.Usage
	return u, sc.Scan(&u.PromptTokens, &u.CompletionTokens)
}

// ScanApprovalDue scans an approval's id and whether its run ended.
func ScanApprovalDue(sc Scanner) (driver.ApprovalDue, error) {
	var d driver.ApprovalDue
	return d, sc.Scan(&d.ID, &d.RunEnded)
}

// ScanBatchKeyHolder scans a run holding a key: the key, the run's id,
// batch and batch index.
func ScanBatchKeyHolder(sc Scanner) (driver.BatchKeyHolder, error) {
	var h driver.BatchKeyHolder
	return h, sc.Scan(&h.Key, &h.RunID, &h.BatchID, &h.Index)
}

// ScanBatchStatusCount scans a status, its count and their usage.
func ScanBatchStatusCount(sc Scanner) (driver.BatchStatusCount, error) {
	var c driver.BatchStatusCount
	return c, sc.Scan(&c.Status, &c.N, &c.Usage.PromptTokens, &c.Usage.CompletionTokens)
}

// ScanUsageRow scans a usage key, its tokens and its calls.
func ScanUsageRow(sc Scanner) (store.UsageRow, error) {
	var u store.UsageRow
	return u, sc.Scan(&u.Key, &u.Usage.PromptTokens, &u.Usage.CompletionTokens, &u.Calls)
}
