package rules

import (
	"time"

	"github.com/agentfleet/agentfleet"
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
