package rules

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		in      agentfleet.BudgetWindow
		want    Window
		invalid bool
	}{
		{in: "", want: Window{Kind: agentfleet.WindowDay, Name: agentfleet.WindowDay}},
		{in: "day", want: Window{Kind: agentfleet.WindowDay, Name: "day"}},
		{in: "month", want: Window{Kind: agentfleet.WindowMonth, Name: "month"}},
		{in: "24h", want: Window{Every: 24 * time.Hour, Name: "24h"}},
		{in: "1h30m", want: Window{Every: 90 * time.Minute, Name: "1h30m"}},
		{in: "1s", want: Window{Every: time.Second, Name: "1s"}},
		{in: "999ms", invalid: true},
		{in: "-1h", invalid: true},
		{in: "week", invalid: true},
		{in: "1", invalid: true},
	} {
		got, err := ParseWindow(tc.in)
		if tc.invalid {
			require.ErrorIs(t, err, store.ErrInvalid, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestWindowBounds(t *testing.T) {
	for _, tc := range []struct {
		window     agentfleet.BudgetWindow
		now        string
		start, end string
	}{
		{"day", "2025-03-14T10:30:00Z", "2025-03-14T00:00:00Z", "2025-03-15T00:00:00Z"},
		{"day", "2025-03-14T00:00:00Z", "2025-03-14T00:00:00Z", "2025-03-15T00:00:00Z"},
		{"day", "2025-03-14T23:30:00-02:00", "2025-03-15T00:00:00Z", "2025-03-16T00:00:00Z"}, // UTC, not local
		{"day", "2024-12-31T12:00:00Z", "2024-12-31T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"month", "2025-01-31T23:59:59Z", "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z"},
		{"month", "2024-02-29T12:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"month", "2025-12-05T00:00:00Z", "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"1h", "2025-03-14T10:17:00Z", "2025-03-14T10:17:00Z", "2025-03-14T11:17:00Z"},
		{"24h", "2025-03-14T10:17:00.5Z", "2025-03-14T10:17:00.5Z", "2025-03-15T10:17:00.5Z"},
	} {
		w, err := ParseWindow(tc.window)
		require.NoError(t, err)
		start, end := w.Bounds(at(tc.now))
		require.Equal(t, at(tc.start).UTC(), start, "%s at %s", tc.window, tc.now)
		require.Equal(t, at(tc.end).UTC(), end, "%s at %s", tc.window, tc.now)
	}
}

func TestLedgerReserve(t *testing.T) {
	day := Window{Kind: agentfleet.WindowDay, Name: "day"}
	now := at("2025-03-14T10:30:20Z")
	open := Ledger{Tenant: "t", Limit: 100, Window: day, Used: 50, Reserved: 20,
		WindowStart: at("2025-03-14T00:00:00Z"), WindowEnd: at("2025-03-15T00:00:00Z")}
	for _, tc := range []struct {
		name      string
		l         Ledger
		n         int64
		now       time.Time
		refused   bool
		perMinute bool
		want      Ledger
	}{
		{name: "fits", l: open, n: 30, now: now,
			want: withReserve(open, 50, 30, now)},
		{name: "one over", l: open, n: 31, now: now, refused: true},
		{name: "unlimited", l: Ledger{Window: day}, n: 1 << 40, now: now,
			want: Ledger{Window: day, Reserved: 1 << 40, WindowStart: open.WindowStart, WindowEnd: open.WindowEnd,
				MinuteStart: at("2025-03-14T10:30:00Z"), MinuteUsed: 1 << 40}},
		{name: "rolls at the end", l: open, n: 80, now: open.WindowEnd,
			want: Ledger{Tenant: "t", Limit: 100, Window: day, Used: 0, Reserved: 100, WindowStart: open.WindowEnd,
				WindowEnd: at("2025-03-16T00:00:00Z"), MinuteStart: open.WindowEnd, MinuteUsed: 80}},
		{name: "reservations carry over a roll", l: open, n: 81, now: open.WindowEnd, refused: true},
		{name: "per minute", l: Ledger{Window: day, TokensPerMinute: 10, MinuteStart: at("2025-03-14T10:30:00Z"), MinuteUsed: 8},
			n: 3, now: now, refused: true, perMinute: true},
		{name: "per minute, next minute", l: Ledger{Window: day, TokensPerMinute: 10, MinuteStart: at("2025-03-14T10:29:00Z"), MinuteUsed: 8},
			n: 10, now: now, want: Ledger{Window: day, TokensPerMinute: 10, Reserved: 10, WindowStart: open.WindowStart,
				WindowEnd: open.WindowEnd, MinuteStart: at("2025-03-14T10:30:00Z"), MinuteUsed: 10}},
	} {
		got, err := tc.l.Reserve(tc.n, tc.now)
		if tc.refused {
			var be *agentfleet.BudgetExhaustedError
			require.True(t, errors.As(err, &be), tc.name)
			require.Equal(t, tc.perMinute, be.PerMinute, tc.name)
			require.Equal(t, tc.n, be.Need, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
}

func withReserve(l Ledger, used, n int64, now time.Time) Ledger {
	l.Used = used
	l.Reserved += n
	l.MinuteStart = MinuteOf(now)
	l.MinuteUsed = n
	return l
}

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		limit, used, reported, charged, overage int64
	}{
		{0, 500, 300, 300, 0},
		{1000, 500, 300, 300, 0},
		{1000, 900, 300, 100, 200},
		{1000, 1000, 300, 0, 300},
		{1000, 1200, 300, 0, 300}, // a limit lowered below used
		{1000, 0, 0, 0, 0},
	} {
		c, o := Charge(tc.limit, tc.used, tc.reported)
		require.Equal(t, tc.charged, c, "%+v", tc)
		require.Equal(t, tc.overage, o, "%+v", tc)
	}
}

func TestLedgerState(t *testing.T) {
	hour := Window{Every: time.Hour, Name: "1h"}
	l := Ledger{Tenant: "t", Limit: 10, Window: hour, Used: 7, Reserved: 2,
		WindowStart: at("2025-03-14T10:00:00Z"), WindowEnd: at("2025-03-14T11:00:00Z")}
	st := l.State(at("2025-03-14T10:59:59Z"))
	require.Equal(t, int64(7), st.Used)
	require.Equal(t, l.WindowEnd, st.WindowEnd)
	st = l.State(at("2025-03-14T11:00:00Z"))
	require.Zero(t, st.Used, "a due window shows rolled")
	require.Equal(t, int64(2), st.Reserved)
	require.True(t, st.WindowStart.IsZero(), "a duration window opens at the next use")
	l.Window = Window{Kind: agentfleet.WindowMonth, Name: "month"}
	st = l.State(at("2025-04-02T00:00:00Z"))
	require.Equal(t, at("2025-04-01T00:00:00Z"), st.WindowStart, "a calendar window shows the current one")
}

func TestCursor(t *testing.T) {
	for _, oldest := range []bool{false, true} {
		c := EncodeCursor(oldest, 12345)
		seq, err := DecodeCursor(c, oldest)
		require.NoError(t, err)
		require.Equal(t, int64(12345), seq)
		_, err = DecodeCursor(c, !oldest)
		require.ErrorIs(t, err, store.ErrInvalid)
	}
	for _, bad := range []string{"", "x", "!!!", EncodeCursor(false, 1)[:1]} {
		_, err := DecodeCursor(bad, false)
		require.ErrorIs(t, err, store.ErrInvalid, "%q", bad)
	}
}

func TestTenantCursor(t *testing.T) {
	ten := agentfleet.Tenant{ID: "acme-1", CreatedAt: time.UnixMicro(1_700_000_000_123_456)}
	pos, err := DecodeTenantCursor(EncodeTenantCursor(ten))
	require.NoError(t, err)
	require.Equal(t, TenantPos{CreatedAt: 1_700_000_000_123_456, ID: "acme-1"}, pos)
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{"", "!!!", EncodeCursor(false, 1), b64("t12"), b64("tx:acme"), b64("t12:"), b64("t12:a.b"), b64("12:acme")} {
		_, err := DecodeTenantCursor(bad)
		require.ErrorIs(t, err, store.ErrInvalid, "%q", bad)
	}
}

func TestTransitionPairs(t *testing.T) {
	pairs := map[string]bool{}
	for _, p := range TransitionPairs {
		pairs[p] = true
	}
	for _, from := range Statuses {
		for _, to := range Statuses {
			require.Equal(t, from.CanTransition(to), pairs[string(from)+">"+string(to)], "%s > %s", from, to)
		}
	}
	require.Len(t, Terminal, 4)
	require.ElementsMatch(t, []agentfleet.RunStatus{agentfleet.StatusRunning, agentfleet.StatusWaitingBudget,
		agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren}, Active)
}

func TestCheckCommitFence(t *testing.T) {
	run := agentfleet.Run{ID: "r", Status: agentfleet.StatusRunning, Turn: 2}
	require.NoError(t, CheckCommitFence(run, 3, agentfleet.StatusRunning))
	require.ErrorIs(t, CheckCommitFence(run, 2, agentfleet.StatusRunning), store.ErrConflict)
	require.ErrorIs(t, CheckCommitFence(run, 4, agentfleet.StatusRunning), store.ErrConflict)
	require.ErrorIs(t, CheckCommitFence(run, 3, agentfleet.StatusQueued), store.ErrInvalid)
	run.Status = agentfleet.StatusCompleted
	require.ErrorIs(t, CheckCommitFence(run, 3, agentfleet.StatusRunning), store.ErrConflict, "ended beats illegal")
}

func TestCheckID(t *testing.T) {
	for _, ok := range []string{"a", "acme", "ACME_2", "0190b6c4-7d1e-7c3a-9f00-123456789abc", strings.Repeat("x", 128)} {
		require.NoError(t, CheckID("id", ok), ok)
	}
	for _, bad := range []string{"", "-a", "a.b", "a b", "a/b", "a*", "a>", strings.Repeat("x", 129)} {
		require.ErrorIs(t, CheckID("id", bad), store.ErrInvalid, bad)
	}
}

func TestMigrations(t *testing.T) {
	ms, err := Migrations(fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("B")},
		"m/0001_init.sql": {Data: []byte("A")},
		"m/README":        {Data: []byte("ignored")},
	}, "m")
	require.NoError(t, err)
	require.Equal(t, []Migration{{1, "0001_init", "A"}, {2, "0002_more", "B"}}, ms)
	_, err = Migrations(fstest.MapFS{"m/0001_a.sql": {}, "m/1_b.sql": {}}, "m")
	require.Error(t, err, "a duplicate version")
	_, err = Migrations(fstest.MapFS{"m/init.sql": {}}, "m")
	require.Error(t, err, "an unnumbered file")
}

func TestEventsAndSteps(t *testing.T) {
	now := at("2025-01-01T00:00:00Z")
	evs, err := Events([]agentfleet.Event{{Type: agentfleet.EventLog}, {Type: agentfleet.EventLog, Turn: 2, TS: at("2024-01-01T00:00:00.0000019Z")}}, 5, now)
	require.NoError(t, err)
	require.Equal(t, 5, evs[0].Turn)
	require.Equal(t, now, evs[0].TS)
	require.Equal(t, 2, evs[1].Turn)
	require.Equal(t, at("2024-01-01T00:00:00.000001Z"), evs[1].TS, "truncated to microseconds")
	require.Equal(t, agentfleet.EventVersion, evs[1].V)

	steps, err := Steps([]agentfleet.Step{{Kind: agentfleet.StepModel, Index: 7}, {Kind: agentfleet.StepObservation, Turn: 3}}, "r", 3, now)
	require.NoError(t, err)
	require.Equal(t, []agentfleet.Step{
		{RunID: "r", Turn: 3, Index: 0, Kind: agentfleet.StepModel, CreatedAt: now},
		{RunID: "r", Turn: 3, Index: 1, Kind: agentfleet.StepObservation, CreatedAt: now},
	}, steps)
	_, err = Steps([]agentfleet.Step{{Kind: agentfleet.StepModel, Turn: 2}}, "r", 3, now)
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestLedgerWindow(t *testing.T) {
	hour, _ := ParseWindow("1h")
	day, _ := ParseWindow("day")
	uses := []time.Time{at("2025-03-14T10:00:00Z"), at("2025-03-14T10:59:00Z"), at("2025-03-14T12:00:00Z")}
	var asked []time.Time
	next := func(t time.Time) (time.Time, bool, error) {
		asked = append(asked, t)
		for _, u := range uses {
			if !u.Before(t) {
				return u, true, nil
			}
		}
		return time.Time{}, false, nil
	}
	for _, tc := range []struct {
		name       string
		l          Ledger
		now        string
		start, end string // empty: none open
	}{
		{name: "calendar", l: Ledger{Window: day}, now: "2025-03-14T10:30:00Z", start: "2025-03-14T00:00:00Z", end: "2025-03-15T00:00:00Z"},
		{name: "before any use", l: Ledger{Window: hour}, now: "2025-03-14T09:00:00Z"},
		{name: "first window", l: Ledger{Window: hour}, now: "2025-03-14T10:30:00Z", start: "2025-03-14T10:00:00Z", end: "2025-03-14T11:00:00Z"},
		{name: "ended, next not yet", l: Ledger{Window: hour}, now: "2025-03-14T11:30:00Z"},
		{name: "second window", l: Ledger{Window: hour}, now: "2025-03-14T12:30:00Z", start: "2025-03-14T12:00:00Z", end: "2025-03-14T13:00:00Z"},
		{name: "all ended", l: Ledger{Window: hour}, now: "2025-03-14T13:00:00Z"},
		{name: "the row's open window", l: Ledger{Window: hour, WindowStart: at("2025-03-14T09:30:00Z"), WindowEnd: at("2025-03-14T10:30:00Z")},
			now: "2025-03-14T10:15:00Z", start: "2025-03-14T09:30:00Z", end: "2025-03-14T10:30:00Z"},
		{name: "after the row's window", l: Ledger{Window: hour, WindowStart: at("2025-03-14T09:30:00Z"), WindowEnd: at("2025-03-14T10:30:00Z")},
			now: "2025-03-14T11:00:00Z", start: "2025-03-14T10:59:00Z", end: "2025-03-14T11:59:00Z"},
	} {
		asked = nil
		start, end, open, err := tc.l.LedgerWindow(at(tc.now), next)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.start != "", open, tc.name)
		if open {
			require.Equal(t, at(tc.start), start, tc.name)
			require.Equal(t, at(tc.end), end, tc.name)
		}
		if tc.l.Window.Calendar() {
			require.Empty(t, asked, "%s: a calendar window needs no ledger", tc.name)
		}
	}
	boom := errors.New("boom")
	_, _, _, err := Ledger{Window: hour}.LedgerWindow(at("2025-03-14T10:00:00Z"), func(time.Time) (time.Time, bool, error) { return time.Time{}, false, boom })
	require.ErrorIs(t, err, boom)

	// OpenWindow opens the window a use at now opens when none is.
	start, end, err := Ledger{Window: hour}.OpenWindow(at("2025-03-14T11:30:00Z"), next)
	require.NoError(t, err)
	require.Equal(t, at("2025-03-14T11:30:00Z"), start)
	require.Equal(t, at("2025-03-14T12:30:00Z"), end)
}

func TestBudgetSettleParams(t *testing.T) {
	_, err := BudgetSettle(store.BudgetSettleParams{})
	require.ErrorIs(t, err, store.ErrInvalid)
	p, err := BudgetSettle(store.BudgetSettleParams{Tenant: "acme"})
	require.NoError(t, err, "an unlimited tenant's settle names the tenant")
	require.False(t, p.Now.IsZero())
	_, err = BudgetSettle(store.BudgetSettleParams{ReservationID: "r", Usage: agentfleet.Usage{CompletionTokens: -1}})
	require.ErrorIs(t, err, store.ErrInvalid)

	now := at("2025-03-14T10:00:00Z")
	mr, err := ModelReplyRecord(store.ModelReplyRecordParams{ModelReply: store.ModelReply{RunID: "r", Turn: 1},
		Charge: &store.BudgetSettleParams{ReservationID: "x"}}, now)
	require.NoError(t, err)
	require.Equal(t, now, mr.CreatedAt)
	require.False(t, mr.Charge.Now.IsZero(), "the charge's defaults are filled")
	_, err = ModelReplyRecord(store.ModelReplyRecordParams{ModelReply: store.ModelReply{RunID: "r", Turn: 1},
		Charge: &store.BudgetSettleParams{}}, now)
	require.ErrorIs(t, err, store.ErrInvalid)
}
