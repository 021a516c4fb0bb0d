package rules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Window is a parsed agentfleet.BudgetWindow: a calendar day or month
// (UTC), or a tumbling window of a fixed length that starts at the first
// use after the previous one ended.
type Window struct {
	Kind  agentfleet.BudgetWindow // WindowDay, WindowMonth, or "" for a duration
	Every time.Duration           // the length of a duration window
	// Name is the window as the tenant was given it ("24h" stays "24h").
	Name agentfleet.BudgetWindow
}

// MinWindow is the shortest duration window; shorter ones are a typo
// ("1" meaning a day) more often than a wish.
const MinWindow = time.Second

// ParseWindow parses a window; empty means WindowDefault.
func ParseWindow(w agentfleet.BudgetWindow) (Window, error) {
	switch w {
	case "":
		return Window{Kind: WindowDefault, Name: WindowDefault}, nil
	case agentfleet.WindowDay, agentfleet.WindowMonth:
		return Window{Kind: w, Name: w}, nil
	}
	d, err := time.ParseDuration(string(w))
	if err != nil || d < MinWindow {
		return Window{}, Invalidf("budget window %q: use \"day\", \"month\" or a Go duration of at least %s such as \"24h\"", w, MinWindow)
	}
	return Window{Every: d, Name: w}, nil
}

// Bounds returns the window that a use at now opens.
func (w Window) Bounds(now time.Time) (start, end time.Time) {
	now = now.UTC()
	switch w.Kind {
	case agentfleet.WindowDay:
		start = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	case agentfleet.WindowMonth:
		start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	return now, now.Add(w.Every)
}

// Calendar reports whether the window is a calendar window (its bounds
// do not depend on when it is first used).
func (w Window) Calendar() bool { return w.Kind != "" }

// MinuteOf is the start of the UTC minute containing t, the unit of the
// tokens-per-minute counter.
func MinuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// Ledger is a tenant's budget row as both backends keep it. The Postgres
// backend applies the same rules in SQL (one statement per operation, for
// atomicity without a round trip under the row lock); the contract suite
// holds both to these.
type Ledger struct {
	Tenant          string
	Limit           int64 // zero: unlimited
	Window          Window
	Used            int64
	Reserved        int64
	WindowStart     time.Time // zero: no window open
	WindowEnd       time.Time
	TokensPerMinute int64
	MinuteStart     time.Time
	MinuteUsed      int64
}

// Due reports whether the window has to roll at now: none is open, or
// the open one has ended.
func (l Ledger) Due(now time.Time) bool {
	return l.WindowEnd.IsZero() || !now.Before(l.WindowEnd)
}

// Roll opens the window a use at now belongs to, when due: used starts
// again from zero, outstanding reservations carry over.
func (l Ledger) Roll(now time.Time) Ledger {
	if l.Due(now) {
		l.Used = 0
		l.WindowStart, l.WindowEnd = l.Window.Bounds(now)
	}
	return l
}

// minuteUsed is what the current minute has taken at now.
func (l Ledger) minuteUsed(now time.Time) int64 {
	if l.MinuteStart.Equal(MinuteOf(now)) {
		return l.MinuteUsed
	}
	return 0
}

// Reserve holds n tokens at now, or says why not with a
// *agentfleet.BudgetExhaustedError. The window limit is checked before the
// per-minute limit: it is the one that lasts.
func (l Ledger) Reserve(n int64, now time.Time) (Ledger, error) {
	l = l.Roll(now)
	if l.Limit > 0 && l.Used+l.Reserved+n > l.Limit {
		return l, &agentfleet.BudgetExhaustedError{
			Tenant: l.Tenant, Need: n, Limit: l.Limit, Used: l.Used, Reserved: l.Reserved, WindowEnd: l.WindowEnd,
		}
	}
	mu := l.minuteUsed(now)
	if l.TokensPerMinute > 0 && mu+n > l.TokensPerMinute {
		return l, &agentfleet.BudgetExhaustedError{
			Tenant: l.Tenant, Need: n, Limit: l.TokensPerMinute, Used: mu,
			WindowEnd: MinuteOf(now).Add(time.Minute), PerMinute: true,
		}
	}
	l.Reserved += n
	l.MinuteStart = MinuteOf(now)
	l.MinuteUsed = mu + n
	return l, nil
}

// Charge is what settling reported tokens costs against a ledger whose
// used (after any roll) is used: all of it, capped so used never exceeds
// the limit. The rest is overage.
func Charge(limit, used, reported int64) (charged, overage int64) {
	charged = reported
	if limit > 0 {
		charged = min(reported, max(limit-used, 0))
	}
	return charged, reported - charged
}

// Settle turns a reservation of reserved tokens into the reported usage.
func (l Ledger) Settle(reserved, reported int64, now time.Time) (Ledger, int64, int64) {
	l = l.Roll(now)
	charged, overage := Charge(l.Limit, l.Used, reported)
	l.Used += charged
	l.Reserved = max(l.Reserved-reserved, 0)
	return l, charged, overage
}

// State is the budget as of now, as BudgetGet reports it. It does not
// write: a due window is shown rolled. A duration window that is due shows
// no bounds, since it opens only at the next use.
func (l Ledger) State(now time.Time) agentfleet.BudgetState {
	if l.Due(now) {
		l.Used = 0
		l.WindowStart, l.WindowEnd = time.Time{}, time.Time{}
		if l.Window.Calendar() {
			l.WindowStart, l.WindowEnd = l.Window.Bounds(now)
		}
	}
	return agentfleet.BudgetState{
		Tenant:          l.Tenant,
		Limit:           l.Limit,
		Window:          l.Window.Name,
		Used:            l.Used,
		Reserved:        l.Reserved,
		WindowStart:     l.WindowStart,
		WindowEnd:       l.WindowEnd,
		TokensPerMinute: l.TokensPerMinute,
		MinuteUsed:      l.minuteUsed(now),
	}
}

// Unlimited reports whether the tenant has neither a window limit nor a
// per-minute one. Such a tenant's row is not written per call: its
// reservations are not recorded (they have an empty id) and its usage
// lives in the usage ledger alone.
func (l Ledger) Unlimited() bool { return Unlimited(l.Limit, l.TokensPerMinute) }

// Unlimited reports whether a tenant with these limits is unlimited.
func Unlimited(limit, tokensPerMinute int64) bool { return limit == 0 && tokensPerMinute == 0 }

// NextUse returns the time of a tenant's first usage ledger entry at or
// after t (zero t: the first entry of all); ok is false when there is
// none.
type NextUse func(t time.Time) (next time.Time, ok bool, err error)

// LedgerWindow is the window of a tenant whose row is not written per
// call (an unlimited tenant) as its ledger would have rolled it, had
// every settlement in the usage ledger been applied to the row: a
// calendar window is the one now falls in; a duration window opens at
// the first settlement at or after the end of the previous one (the
// row's own window, when one is open, is where it starts from). open is
// false when no window is open at now (a duration window that ended, or
// never opened).
func (l Ledger) LedgerWindow(now time.Time, next NextUse) (start, end time.Time, open bool, err error) {
	if l.Window.Calendar() {
		start, end = l.Window.Bounds(now)
		return start, end, true, nil
	}
	start, end = l.WindowStart, l.WindowEnd
	for end.IsZero() || !now.Before(end) {
		t, ok, err := next(end)
		if err != nil {
			return time.Time{}, time.Time{}, false, err
		}
		if !ok || t.After(now) {
			return time.Time{}, time.Time{}, false, nil
		}
		// t >= end, so every turn of the loop moves on.
		start, end = t, t.Add(l.Window.Every)
	}
	return start, end, true, nil
}

// LedgerState is BudgetGet's answer for an unlimited tenant: used is what
// the ledger charged in the window LedgerWindow found (zero, and no
// bounds, when none is open); nothing is reserved or counted per minute.
func (l Ledger) LedgerState(start, end time.Time, open bool, used int64) agentfleet.BudgetState {
	st := agentfleet.BudgetState{Tenant: l.Tenant, Limit: l.Limit, Window: l.Window.Name, TokensPerMinute: l.TokensPerMinute}
	if open {
		st.WindowStart, st.WindowEnd, st.Used = start, end, used
	}
	return st
}

// BudgetState is BudgetGet's answer at now: State for a tenant with a
// limit, whose row counts every use; for an unlimited one, what its usage
// ledger charged in the window LedgerWindow finds (LedgerState). next and
// charged read the usage ledger, as for StartLimited.
func (l Ledger) BudgetState(now time.Time, next NextUse, charged func(from, to time.Time) (int64, error)) (agentfleet.BudgetState, error) {
	if !l.Unlimited() {
		return l.State(now), nil
	}
	start, end, open, err := l.LedgerWindow(now, next)
	if err != nil {
		return agentfleet.BudgetState{}, err
	}
	var used int64
	if open {
		if used, err = charged(start, end); err != nil {
			return agentfleet.BudgetState{}, err
		}
	}
	return l.LedgerState(start, end, open, used), nil
}

// StartLimited is what TenantUpdate writes to the row of a tenant that was
// unlimited and is given a limit at now: used is what the ledger charged
// in the current window (the one the ledger has open, else the one a use
// at now opens), the minute's count is what it charged in the current
// minute, and reservations are kept. charged reads the usage ledger: what
// it charged the tenant in [from, to).
func (l Ledger) StartLimited(now time.Time, next NextUse, charged func(from, to time.Time) (int64, error)) (Ledger, error) {
	start, end, err := l.OpenWindow(now, next)
	if err != nil {
		return l, err
	}
	used, err := charged(start, end)
	if err != nil {
		return l, err
	}
	minute := MinuteOf(now)
	minuteUsed, err := charged(minute, minute.Add(time.Minute))
	if err != nil {
		return l, err
	}
	l.WindowStart, l.WindowEnd = start, end
	l.Used = used
	l.MinuteStart, l.MinuteUsed = minute, minuteUsed
	return l, nil
}

// OpenWindow is the window an unlimited tenant given a limit at now starts
// from: the one its ledger has open, else the one a use at now opens.
func (l Ledger) OpenWindow(now time.Time, next NextUse) (start, end time.Time, err error) {
	start, end, open, err := l.LedgerWindow(now, next)
	if err != nil || open {
		return start, end, err
	}
	start, end = l.Window.Bounds(now)
	return start, end, nil
}

func (s *Store) BudgetRelease(ctx context.Context, reservationID string) error {
	if reservationID == "" {
		return nil // an unlimited tenant's reservation: nothing was held
	}
	if err := s.d.ReservationRelease(ctx, reservationID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("reservation %s (settled, released or expired): %w", reservationID, store.ErrNotFound)
		}
		return fmt.Errorf("release reservation %s: %w", reservationID, err)
	}
	return nil
}

func (s *Store) BudgetExpire(ctx context.Context, now time.Time) (int, error) {
	now = NowOr(now)
	n, err := s.d.ReservationExpire(ctx, now)
	if err != nil {
		return 0, fmt.Errorf("expire reservations before %s: %w", now.Format(time.RFC3339), err)
	}
	return n, nil
}

func (s *Store) UsageList(ctx context.Context, p store.UsageListParams) ([]store.UsageRow, error) {
	p, err := UsageList(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.d.UsageList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list usage of %s: %w", p.Tenant, err)
	}
	return rows, nil
}

func (s *Store) JournalListByRun(ctx context.Context, p store.JournalListByRunParams) ([]agentfleet.JournalEntry, error) {
	if err := JournalListByRun(p); err != nil {
		return nil, err
	}
	out, err := s.d.JournalList(ctx, p.RunID, p.Turn)
	if err != nil {
		return nil, fmt.Errorf("list the journal of run %s: %w", p.RunID, err)
	}
	return out, nil
}

// LedgerFrom parses a stored ledger row.
func LedgerFrom(r driver.Ledger) (Ledger, error) {
	w, err := ParseWindow(r.Window)
	return Ledger{Tenant: r.Tenant, Limit: r.Limit, Window: w, Used: r.Used, Reserved: r.Reserved, WindowStart: r.WindowStart,
		WindowEnd: r.WindowEnd, TokensPerMinute: r.TokensPerMinute, MinuteStart: r.MinuteStart, MinuteUsed: r.MinuteUsed}, err
}

// Row is l as stored.
func (l Ledger) Row() driver.Ledger {
	return driver.Ledger{Tenant: l.Tenant, Limit: l.Limit, Window: l.Window.Name, Used: l.Used, Reserved: l.Reserved,
		WindowStart: l.WindowStart, WindowEnd: l.WindowEnd, TokensPerMinute: l.TokensPerMinute, MinuteStart: l.MinuteStart, MinuteUsed: l.MinuteUsed}
}

// usage is the usage ledger as Ledger's window maths reads it.
func usage(ctx context.Context, x driver.Executor, tenant string) (NextUse, func(from, to time.Time) (int64, error)) {
	return func(t time.Time) (time.Time, bool, error) { return x.UsageFirst(ctx, tenant, t) },
		func(from, to time.Time) (int64, error) { return x.UsageSum(ctx, tenant, from, to) }
}

// BudgetGet reads the ledger and the usage ledger on one snapshot and
// writes nothing: a due window shows rolled.
func (s *Store) BudgetGet(ctx context.Context, tenant string, now time.Time) (agentfleet.BudgetState, error) {
	now = NowOr(now)
	var st agentfleet.BudgetState
	err := s.d.Read(ctx, func(x driver.Executor) error {
		r, err := x.LedgerGet(ctx, tenant)
		if err != nil {
			return err
		}
		l, err := LedgerFrom(r)
		if err != nil {
			return err
		}
		next, sum := usage(ctx, x, tenant)
		st, err = l.BudgetState(now, next, sum)
		return err
	})
	if err != nil {
		return agentfleet.BudgetState{}, fmt.Errorf("get budget of %s: %w", tenant, err)
	}
	return st, nil
}

// TenantUpdate changes the set fields under the tenant's row lock. A
// changed window restarts: used starts again from zero and the next use
// opens the new window; reservations carry over. An unlimited tenant
// given a limit starts from what its usage ledger charged in the current
// window (see store.TenantUpdateParams); under the lock no settlement
// can slip past that sum.
func (s *Store) TenantUpdate(ctx context.Context, p store.TenantUpdateParams) (agentfleet.Tenant, error) {
	p, w, err := TenantUpdate(p)
	if err != nil {
		return agentfleet.Tenant{}, err
	}
	now := Now()
	var t agentfleet.Tenant
	err = s.d.Tx(ctx, func(x driver.Executor) error {
		cur, r, err := x.LedgerLock(ctx, p.ID)
		if err != nil {
			return err
		}
		l, err := LedgerFrom(r)
		if err != nil {
			return err
		}
		restart := w != nil && w.Name != cur.Window
		wasUnlimited := l.Unlimited()
		setTenant(&cur, p)
		var every *time.Duration
		if w != nil {
			every = &w.Every
		}
		switch {
		case restart:
			l.Used, l.WindowStart, l.WindowEnd = 0, time.Time{}, time.Time{}
		case wasUnlimited && !Unlimited(cur.TokenLimit, cur.TokensPerMinute):
			next, sum := usage(ctx, x, p.ID)
			if l, err = l.StartLimited(now, next, sum); err != nil {
				return err
			}
		}
		t, err = x.TenantUpdate(ctx, cur, every, l.Row(), now)
		return err
	})
	if err != nil {
		return agentfleet.Tenant{}, fmt.Errorf("update tenant %s: %w", p.ID, err)
	}
	if p.MaxQueuedRuns != nil {
		s.Queue.Forget(p.ID)
	}
	return t, nil
}

// setTenant sets p's set fields on t.
func setTenant(t *agentfleet.Tenant, p store.TenantUpdateParams) {
	if p.TokenLimit != nil {
		t.TokenLimit = *p.TokenLimit
	}
	if p.Window != nil {
		t.Window = *p.Window
	}
	if p.TokensPerMinute != nil {
		t.TokensPerMinute = *p.TokensPerMinute
	}
	if p.MaxConcurrentRuns != nil {
		t.MaxConcurrentRuns = *p.MaxConcurrentRuns
	}
	if p.MaxQueuedRuns != nil {
		t.MaxQueuedRuns = *p.MaxQueuedRuns
	}
	if p.Weight != nil {
		t.Weight = *p.Weight
	}
	if p.Exhausted != nil {
		t.Exhausted = *p.Exhausted
	}
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

// BudgetSettle validates p and settles it through the driver's one
// primitive.
func (s *Store) BudgetSettle(ctx context.Context, p store.BudgetSettleParams) (store.BudgetSettleResult, error) {
	p, err := BudgetSettle(p)
	if err != nil {
		return store.BudgetSettleResult{}, err
	}
	res, err := s.d.LedgerSettle(ctx, p)
	if err != nil {
		return store.BudgetSettleResult{}, fmt.Errorf("settle %s: %w", SettleName(p), err)
	}
	return res, nil
}

// SettleName names a settle in errors: its reservation, or the tenant and
// run of unreserved usage.
func SettleName(p store.BudgetSettleParams) string {
	if p.ReservationID == "" {
		return fmt.Sprintf("unreserved usage of tenant %s run %s", p.Tenant, p.RunID)
	}
	return "reservation " + p.ReservationID
}
