package rules

import (
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// TenantCreate validates p and fills its defaults.
func TenantCreate(p store.TenantCreateParams) (store.TenantCreateParams, Window, error) {
	if err := CheckID("tenant id", p.ID); err != nil {
		return p, Window{}, err
	}
	if p.TokenLimit < 0 || p.TokensPerMinute < 0 {
		return p, Window{}, Invalidf("tenant %s: token limits must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxConcurrentRuns < 0 {
		return p, Window{}, Invalidf("tenant %s: max concurrent runs must not be negative (zero means unlimited)", p.ID)
	}
	if p.Weight < 0 {
		return p, Window{}, Invalidf("tenant %s: weight must not be negative (zero means 1)", p.ID)
	}
	if err := AgentUpsert(store.AgentUpsertParams{Tenant: p.ID, Name: agentfleet.DefaultAgent, Spec: p.DefaultAgent}); err != nil {
		return p, Window{}, err
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	var err error
	if p.MaxQueuedRuns, err = maxQueuedRuns(p.ID, p.MaxQueuedRuns); err != nil {
		return p, Window{}, err
	}
	w, err := ParseWindow(p.Window)
	if err != nil {
		return p, Window{}, err
	}
	p.Window = w.Name
	if p.Exhausted, err = exhausted(p.Exhausted); err != nil {
		return p, Window{}, err
	}
	return p, w, nil
}

// maxQueuedRuns checks a tenant's max_queued_runs and fills the default.
func maxQueuedRuns(tenant string, n int) (int, error) {
	switch {
	case n < 0:
		return 0, Invalidf("tenant %s: max queued runs must not be negative (zero means the default, %d)", tenant, store.MaxQueuedRunsDefault)
	case n == 0:
		return store.MaxQueuedRunsDefault, nil
	}
	return n, nil
}

func exhausted(e agentfleet.ExhaustedPolicy) (agentfleet.ExhaustedPolicy, error) {
	switch e {
	case "":
		return agentfleet.ExhaustedQueue, nil
	case agentfleet.ExhaustedQueue, agentfleet.ExhaustedFail:
		return e, nil
	}
	return "", Invalidf("exhausted policy %q: use %q or %q", e, agentfleet.ExhaustedQueue, agentfleet.ExhaustedFail)
}

// TenantUpdate validates the set fields of p. The returned window is
// non-nil when p changes it.
func TenantUpdate(p store.TenantUpdateParams) (store.TenantUpdateParams, *Window, error) {
	if p.ID == "" {
		return p, nil, Invalidf("tenant id is empty")
	}
	if (p.TokenLimit != nil && *p.TokenLimit < 0) || (p.TokensPerMinute != nil && *p.TokensPerMinute < 0) {
		return p, nil, Invalidf("tenant %s: token limits must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxConcurrentRuns != nil && *p.MaxConcurrentRuns < 0 {
		return p, nil, Invalidf("tenant %s: max concurrent runs must not be negative (zero means unlimited)", p.ID)
	}
	if p.MaxQueuedRuns != nil {
		n, err := maxQueuedRuns(p.ID, *p.MaxQueuedRuns)
		if err != nil {
			return p, nil, err
		}
		p.MaxQueuedRuns = &n
	}
	if p.Weight != nil {
		if *p.Weight < 0 {
			return p, nil, Invalidf("tenant %s: weight must not be negative (zero means 1)", p.ID)
		}
		if *p.Weight == 0 {
			one := 1
			p.Weight = &one
		}
	}
	if p.Exhausted != nil {
		e, err := exhausted(*p.Exhausted)
		if err != nil {
			return p, nil, err
		}
		p.Exhausted = &e
	}
	if p.Window == nil {
		return p, nil, nil
	}
	w, err := ParseWindow(*p.Window)
	if err != nil {
		return p, nil, err
	}
	p.Window = &w.Name
	return p, &w, nil
}

// apiKeyNameMax bounds a key's name.
const apiKeyNameMax = 100

// APIKeyCreate validates p; scopes is how its scopes are stored.
func APIKeyCreate(p store.APIKeyCreateParams) (scopes string, err error) {
	if p.Tenant == "" || p.Key == "" {
		return "", Invalidf("api key: tenant and key are required")
	}
	if len(p.Name) > apiKeyNameMax {
		return "", Invalidf("api key name is %d bytes: use at most %d", len(p.Name), apiKeyNameMax)
	}
	if err := CheckText("api key name", p.Name); err != nil {
		return "", err
	}
	return EncodeAPIKeyScopes(p.Scopes)
}

// EncodeAPIKeyScopes stores scopes as a comma-separated list in
// store.APIKeyScopes' order, each once; none is every scope.
func EncodeAPIKeyScopes(scopes []string) (string, error) {
	if len(scopes) == 0 {
		scopes = store.APIKeyScopes
	}
	for _, sc := range scopes {
		if !slices.Contains(store.APIKeyScopes, sc) {
			return "", Invalidf("api key scope %q is not one of %s", sc, strings.Join(store.APIKeyScopes, ", "))
		}
	}
	var out []string
	for _, sc := range store.APIKeyScopes {
		if slices.Contains(scopes, sc) {
			out = append(out, sc)
		}
	}
	return strings.Join(out, ","), nil
}

// DecodeAPIKeyScopes reverses EncodeAPIKeyScopes.
func DecodeAPIKeyScopes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// APIKeyList validates p and fills its defaults; it returns the position
// the cursor continues after (zero: from the newest).
func APIKeyList(p store.APIKeyListParams) (store.APIKeyListParams, int64, error) {
	if p.Tenant == "" {
		return p, 0, Invalidf("api key list: tenant is empty")
	}
	var err error
	if p.Limit, err = PageLimit("api key list", p.Limit); err != nil {
		return p, 0, err
	}
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, false)
	return p, after, err
}

// APIKeyPage is APIKeyList p's answer from rows read newest first, one
// more than p.Limit when a page follows; seqs are the rows' positions.
func APIKeyPage(keys []store.APIKey, seqs []int64, p store.APIKeyListParams) store.APIKeyListResult {
	var res store.APIKeyListResult
	if len(keys) > p.Limit {
		keys = keys[:p.Limit]
		res.NextCursor = EncodeCursor(false, seqs[p.Limit-1])
	}
	res.Keys = keys
	return res
}

// TenantList validates p and fills its defaults; it returns the position
// the cursor continues after (nil: from the newest).
func TenantList(p store.TenantListParams) (store.TenantListParams, *TenantPos, error) {
	var err error
	if p.Limit, err = PageLimit("tenant list", p.Limit); err != nil {
		return p, nil, err
	}
	if p.Cursor == "" {
		return p, nil, nil
	}
	pos, err := DecodeTenantCursor(p.Cursor)
	return p, &pos, err
}

// TenantPage is TenantList p's answer from rows read newest first, one
// more than p.Limit when a page follows.
func TenantPage(ts []agentfleet.Tenant, p store.TenantListParams) store.TenantListResult {
	var res store.TenantListResult
	if len(ts) > p.Limit {
		ts = ts[:p.Limit]
		res.NextCursor = EncodeTenantCursor(ts[len(ts)-1])
	}
	res.Tenants = ts
	return res
}

// RunCreate validates p and fills its defaults: a fresh id, the default
// agent, timestamps normalised.
func RunCreate(p store.RunCreateParams) (store.RunCreateParams, error) {
	if p.ID == "" {
		p.ID = NewID()
	} else if err := CheckID("run id", p.ID); err != nil {
		return p, err
	}
	if err := CheckID("tenant id", p.Tenant); err != nil {
		return p, err
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	if p.MaxTurns < 0 || p.MaxTokens < 0 {
		return p, Invalidf("run %s: max turns and max tokens must not be negative (zero means the default)", p.ID)
	}
	if p.Depth < 0 || (p.Depth > 0) != (p.ParentRunID != "") {
		return p, Invalidf("run %s: a child run names its parent and a depth from 1", p.ID)
	}
	if p.ParentRunID != "" {
		if err := CheckID("parent run id", p.ParentRunID); err != nil {
			return p, err
		}
	}
	if err := CheckJSON("run context", p.Context); err != nil {
		return p, err
	}
	// Submitted by a client: refused, not cleaned (see text.go).
	if err := checkTexts("message", p.Message, "agent", p.Agent, "session id", p.SessionID,
		"idempotency key", p.IdempotencyKey, "batch id", p.BatchID); err != nil {
		return p, err
	}
	if err := CheckMetadata("metadata", p.Metadata); err != nil {
		return p, err
	}
	if err := CheckJSONText("context", p.Context); err != nil {
		return p, err
	}
	p.Context = NullJSON(p.Context)
	p.Deadline = Time(p.Deadline)
	return p, nil
}

// Events validates events to append and fills what the caller may leave
// out: the version, the timestamp (now) and, when turn is positive and the
// event names none, the turn. Seq and the run's identity are filled by
// Number once the store knows them.
func Events(in []agentfleet.Event, turn int, now time.Time) ([]agentfleet.Event, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]agentfleet.Event, len(in))
	for i, e := range in {
		if e.Type == "" {
			return nil, Invalidf("event %d has no type", i)
		}
		if e.Turn < 0 {
			return nil, Invalidf("event %d has a negative turn", i)
		}
		if err := CheckJSON("event args", e.Args); err != nil {
			return nil, err
		}
		if e.Tokens != nil && (e.Tokens.Prompt < 0 || e.Tokens.Completion < 0) {
			return nil, Invalidf("event %d has negative tokens", i)
		}
		e.V = agentfleet.EventVersion
		e.Type = agentfleet.EventType(Clean(string(e.Type)))
		e.Content, e.Summary = Clean(e.Content), Clean(e.Summary)
		e.Args = CleanJSON(NullJSON(e.Args))
		if e.Turn == 0 && turn > 0 {
			e.Turn = turn
		}
		if e.TS.IsZero() {
			e.TS = now
		} else {
			e.TS = Time(e.TS)
		}
		if e.Tokens != nil {
			t := *e.Tokens
			e.Tokens = &t
		}
		out[i] = e
	}
	return out, nil
}

// Number stamps events with their run and their seq, continuing after
// lastSeq.
func Number(evs []agentfleet.Event, run agentfleet.Run, lastSeq int64) {
	for i := range evs {
		evs[i].RunID = run.ID
		evs[i].Tenant = run.Tenant
		evs[i].SessionID = run.SessionID
		evs[i].Seq = lastSeq + int64(i) + 1
	}
}

// Steps validates the steps of a turn commit and fills them in: they all
// belong to the committed turn, numbered by their position.
func Steps(in []agentfleet.Step, runID string, turn int, now time.Time) ([]agentfleet.Step, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]agentfleet.Step, len(in))
	for i, s := range in {
		if s.Kind == "" {
			return nil, Invalidf("step %d of turn %d has no kind", i, turn)
		}
		if s.Turn != 0 && s.Turn != turn {
			return nil, Invalidf("step %d names turn %d in the commit of turn %d", i, s.Turn, turn)
		}
		if s.Usage.PromptTokens < 0 || s.Usage.CompletionTokens < 0 {
			return nil, Invalidf("step %d of turn %d has negative usage", i, turn)
		}
		s.RunID, s.Turn, s.Index = runID, turn, i
		s.Content, s.Model = Clean(s.Content), Clean(s.Model)
		if s.CreatedAt.IsZero() {
			s.CreatedAt = now
		} else {
			s.CreatedAt = Time(s.CreatedAt)
		}
		out[i] = s
	}
	return out, nil
}

// TurnCommit validates p and fills in its steps and events.
func TurnCommit(p store.TurnCommitParams, now time.Time) (store.TurnCommitParams, error) {
	if p.RunID == "" {
		return p, Invalidf("turn commit: run id is empty")
	}
	if p.Turn < 1 {
		return p, Invalidf("run %s: turn %d: turns count from 1", p.RunID, p.Turn)
	}
	if !p.Status.Valid() {
		return p, Invalidf("run %s: unknown status %q", p.RunID, p.Status)
	}
	if p.Usage.PromptTokens < 0 || p.Usage.CompletionTokens < 0 || p.DataBytesCarried < 0 {
		return p, Invalidf("run %s: turn %d: usage and carried bytes must not be negative", p.RunID, p.Turn)
	}
	if p.Spawned < 0 {
		return p, Invalidf("run %s: turn %d: spawned children must not be negative", p.RunID, p.Turn)
	}
	if (p.Status == agentfleet.StatusWaitingChildren) != (len(p.WaitIDs) > 0) {
		return p, Invalidf("run %s: turn %d: a run waits for children (status %s) exactly when the commit names them", p.RunID, p.Turn, agentfleet.StatusWaitingChildren)
	}
	for _, id := range p.WaitIDs {
		if err := CheckID("waited child id", id); err != nil {
			return p, err
		}
	}
	p.WaitUntil = Time(p.WaitUntil)
	if err := CheckJSON("carried args", p.Args); err != nil {
		return p, err
	}
	if err := CheckJSON("answer", p.Answer); err != nil {
		return p, err
	}
	p.Args, p.Answer = CleanJSON(NullJSON(p.Args)), CleanJSON(NullJSON(p.Answer))
	p.Error = Clean(p.Error)
	var err error
	if p.Steps, err = Steps(p.Steps, p.RunID, p.Turn, now); err != nil {
		return p, err
	}
	if p.Events, err = Events(p.Events, p.Turn, now); err != nil {
		return p, err
	}
	return p, nil
}

// ModelReplyRecord validates p, its charge included, and fills its
// defaults.
func ModelReplyRecord(p store.ModelReplyRecordParams, now time.Time) (store.ModelReplyRecordParams, error) {
	var err error
	if p.ModelReply, err = ModelReply(p.ModelReply, now); err != nil {
		return p, err
	}
	p.Charge, err = recordCharge(p.Charge)
	return p, err
}

// recordCharge validates the charge of a record, if it has one.
func recordCharge(c *store.BudgetSettleParams) (*store.BudgetSettleParams, error) {
	if c == nil {
		return nil, nil
	}
	v, err := BudgetSettle(*c)
	return &v, err
}

// JournalPrimitives are the primitives whose calls are journaled.
var JournalPrimitives = []string{"fetch", "http", "ai", "aiJSON", "spawn"}

// JournalRecord validates p, its charge included, and fills its
// timestamp. What a script produced (its URL, result, error) is cleaned,
// not refused.
func JournalRecord(p store.JournalRecordParams, now time.Time) (store.JournalRecordParams, error) {
	e := &p.JournalEntry
	if e.RunID == "" || e.Turn < 1 || e.Index < 0 {
		return p, Invalidf("journal entry: run id, a turn from 1 and an index from 0 are required")
	}
	if !slices.Contains(JournalPrimitives, e.Primitive) {
		return p, Invalidf("journal entry of run %s turn %d: primitive %q is not journaled (journaled: %s)",
			e.RunID, e.Turn, e.Primitive, strings.Join(JournalPrimitives, ", "))
	}
	if e.Usage.PromptTokens < 0 || e.Usage.CompletionTokens < 0 {
		return p, Invalidf("journal entry of run %s turn %d: usage must not be negative", e.RunID, e.Turn)
	}
	if len(e.Result) > 0 {
		if err := CheckJSON("journal entry result", e.Result); err != nil {
			return p, err
		}
		e.Result = CleanJSON(e.Result)
	}
	e.Method, e.URL, e.Error = Clean(e.Method), Clean(e.URL), Clean(e.Error)
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	} else {
		e.CreatedAt = Time(e.CreatedAt)
	}
	var err error
	p.Charge, err = recordCharge(p.Charge)
	return p, err
}

// JournalListByRun validates p.
func JournalListByRun(p store.JournalListByRunParams) error {
	if p.RunID == "" {
		return Invalidf("journal list: run id is empty")
	}
	return nil
}

// ModelReply validates a reply to record and fills its timestamp.
func ModelReply(r store.ModelReply, now time.Time) (store.ModelReply, error) {
	if r.RunID == "" || r.Turn < 1 {
		return r, Invalidf("model reply: run id and a turn from 1 are required")
	}
	if r.Usage.PromptTokens < 0 || r.Usage.CompletionTokens < 0 {
		return r, Invalidf("model reply of run %s turn %d: usage must not be negative", r.RunID, r.Turn)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	} else {
		r.CreatedAt = Time(r.CreatedAt)
	}
	r.Content, r.Model = Clean(r.Content), Clean(r.Model)
	return r, nil
}

// RunTransition validates p.
func RunTransition(p store.RunTransitionParams, now time.Time) (store.RunTransitionParams, error) {
	if p.ID == "" {
		return p, Invalidf("run transition: run id is empty")
	}
	if !p.To.Valid() {
		return p, Invalidf("run %s: unknown status %q", p.ID, p.To)
	}
	for _, s := range p.From {
		if !s.Valid() {
			return p, Invalidf("run %s: unknown status %q", p.ID, s)
		}
	}
	if err := CheckJSON("answer", p.Answer); err != nil {
		return p, err
	}
	p.Answer = CleanJSON(NullJSON(p.Answer))
	p.Error = Clean(p.Error)
	var err error
	p.Events, err = Events(p.Events, 0, now)
	return p, err
}

// RunCancel validates p and cleans its reason and events.
func RunCancel(p store.RunCancelParams, now time.Time) (store.RunCancelParams, error) {
	if p.ID == "" {
		return p, Invalidf("run cancel: run id is empty")
	}
	p.Reason = Clean(p.Reason)
	var err error
	p.Events, err = Events(p.Events, 0, now)
	return p, err
}

// BudgetReserve validates p and fills its defaults.
func BudgetReserve(p store.BudgetReserveParams) (store.BudgetReserveParams, error) {
	if p.Tenant == "" {
		return p, Invalidf("budget reserve: tenant is empty")
	}
	if p.Tokens < 1 {
		return p, Invalidf("budget reserve for %s: tokens must be positive, got %d", p.Tenant, p.Tokens)
	}
	if p.Lease < 0 {
		return p, Invalidf("budget reserve for %s: lease must not be negative", p.Tenant)
	}
	if p.Lease == 0 {
		p.Lease = ReservationLeaseDefault
	}
	p.Now = NowOr(p.Now)
	return p, nil
}

// BudgetSettle validates p and fills its defaults.
func BudgetSettle(p store.BudgetSettleParams) (store.BudgetSettleParams, error) {
	if p.ReservationID == "" && p.Tenant == "" {
		return p, Invalidf("budget settle: reservation id and tenant are both empty: name the reservation, or the tenant of an unlimited one")
	}
	if p.Usage.PromptTokens < 0 || p.Usage.CompletionTokens < 0 {
		return p, Invalidf("budget settle of %s: usage must not be negative", p.ReservationID)
	}
	p.Model = Clean(p.Model)
	p.Now = NowOr(p.Now)
	return p, nil
}

// UsageList validates p and fills its defaults.
func UsageList(p store.UsageListParams) (store.UsageListParams, error) {
	if p.Tenant == "" {
		return p, Invalidf("usage list: tenant is empty")
	}
	switch p.GroupBy {
	case "":
		p.GroupBy = UsageGroupByDefault
	case "model", "run":
	default:
		return p, Invalidf("usage list: group by %q: use \"model\" or \"run\"", p.GroupBy)
	}
	p.Since = Time(p.Since)
	return p, nil
}

// RunList validates p and fills its defaults; it returns the position the
// cursor continues after (zero: from the start).
func RunList(p store.RunListParams) (store.RunListParams, int64, error) {
	if p.Limit < 0 {
		return p, 0, Invalidf("run list: limit must not be negative")
	}
	if p.Limit == 0 {
		p.Limit = RunListLimitDefault
	}
	p.Limit = min(p.Limit, RunListLimitMax)
	for _, s := range p.Status {
		if !s.Valid() {
			return p, 0, Invalidf("run list: unknown status %q", s)
		}
	}
	if err := checkTexts("run list: tenant", p.Tenant, "run list: agent", p.Agent, "run list: session id", p.SessionID,
		"run list: batch id", p.BatchID); err != nil {
		return p, 0, err
	}
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, p.Oldest)
	return p, after, err
}

// SkillUpsert validates p.
func SkillUpsert(p store.SkillUpsertParams) error {
	if p.Tenant == "" || p.Name == "" {
		return Invalidf("skill: tenant and name are required")
	}
	return checkTexts("skill name", p.Name, "skill description", p.Description, "skill code", p.Code)
}

// SessionHead decides what a run's end hands out: head is the oldest
// unfinished run of the session after the change (nil if none) and seq
// its position. Only when the ended run was the session's head (nothing
// unfinished before it) does the next queued run become the head.
func SessionHead(endedSeq int64, head *agentfleet.Run, headSeq int64) *agentfleet.Run {
	if head == nil || headSeq < endedSeq || head.Status != agentfleet.StatusQueued {
		return nil
	}
	return head
}

// TurnLoad validates p.
func TurnLoad(p store.TurnLoadParams) error {
	switch {
	case p.RunID == "":
		return Invalidf("turn load: run id is empty")
	case p.Turn < 1:
		return Invalidf("turn load of run %s: turn %d is not positive", p.RunID, p.Turn)
	case p.HistoryFrom < 0:
		return Invalidf("turn load of run %s: history from turn %d is negative", p.RunID, p.HistoryFrom)
	}
	return nil
}

// PageLimit is a list's page size: RunListLimitDefault for zero, at most
// RunListLimitMax.
func PageLimit(what string, limit int) (int, error) {
	if limit < 0 {
		return 0, Invalidf("%s: limit must not be negative", what)
	}
	if limit == 0 {
		return RunListLimitDefault, nil
	}
	return min(limit, RunListLimitMax), nil
}
