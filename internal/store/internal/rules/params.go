package rules

import (
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
	if p.Weight == 0 {
		p.Weight = 1
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

// AgentUpsert validates p.
func AgentUpsert(p store.AgentUpsertParams) error {
	if p.Tenant == "" || p.Name == "" {
		return Invalidf("agent: tenant and name are required")
	}
	if p.MaxCompletionTokens < 0 || p.MaxTurns < 0 {
		return Invalidf("agent %s: limits must not be negative (zero means the default)", p.Name)
	}
	return nil
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
	if err := CheckJSON("run context", p.Context); err != nil {
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
		e.Args = NullJSON(e.Args)
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
	if err := CheckJSON("carried args", p.Args); err != nil {
		return p, err
	}
	if err := CheckJSON("answer", p.Answer); err != nil {
		return p, err
	}
	p.Args, p.Answer = NullJSON(p.Args), NullJSON(p.Answer)
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
	if p.Charge != nil {
		c, err := BudgetSettle(*p.Charge)
		if err != nil {
			return p, err
		}
		p.Charge = &c
	}
	return p, nil
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
	p.Answer = NullJSON(p.Answer)
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
	if p.Cursor == "" {
		return p, 0, nil
	}
	after, err := DecodeCursor(p.Cursor, p.Oldest)
	return p, after, err
}

// ApprovalCreate validates p.
func ApprovalCreate(p store.ApprovalCreateParams) (store.ApprovalCreateParams, error) {
	if p.Tenant == "" || p.RunID == "" || p.Primitive == "" {
		return p, Invalidf("approval: tenant, run id and primitive are required")
	}
	if p.Turn < 0 {
		return p, Invalidf("approval: turn must not be negative")
	}
	if err := CheckJSON("approval args", p.Args); err != nil {
		return p, err
	}
	p.Args = NullJSON(p.Args)
	return p, nil
}

// BatchCreate validates p and fills its id.
func BatchCreate(p store.BatchCreateParams) (store.BatchCreateParams, error) {
	if p.ID == "" {
		p.ID = NewID()
	} else if err := CheckID("batch id", p.ID); err != nil {
		return p, err
	}
	if p.Tenant == "" {
		return p, Invalidf("batch: tenant is required")
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	if p.Total < 0 {
		return p, Invalidf("batch %s: total must not be negative", p.ID)
	}
	return p, nil
}

// SkillUpsert validates p.
func SkillUpsert(p store.SkillUpsertParams) error {
	if p.Tenant == "" || p.Name == "" {
		return Invalidf("skill: tenant and name are required")
	}
	return nil
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
