package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

func TestTenantCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	r := e.do("POST", "/v1/tenants", adminToken, map[string]any{
		"id": "acme", "budget": map[string]any{"tokens": 100000, "window": "day"},
		"tokens_per_minute": 5000, "max_concurrent_runs": 4, "weight": 3, "exhausted": "fail",
	})
	v := decode[wire.TenantView](t, r, http.StatusCreated)
	require.Equal(t, "acme", v.ID)
	require.True(t, strings.HasPrefix(v.APIKey, "af_"), v.APIKey)
	require.EqualValues(t, 100000, v.Budget.Limit)
	require.Equal(t, agentfleet.WindowDay, v.Budget.Window)
	require.Zero(t, v.Budget.Used)
	require.Zero(t, v.Budget.Reserved)
	now := time.Now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if !v.Budget.WindowStart.Equal(day) { // the test straddled midnight
		day = day.AddDate(0, 0, -1)
	}
	require.Equal(t, day, v.Budget.WindowStart.UTC())
	require.Equal(t, day.AddDate(0, 0, 1), v.Budget.WindowEnd.UTC())
	require.EqualValues(t, 5000, v.TokensPerMinute)
	require.Equal(t, 4, v.MaxConcurrentRuns)
	require.Equal(t, 3, v.Weight)
	require.Equal(t, agentfleet.ExhaustedFail, v.Exhausted)
	require.Zero(t, v.WaitingRuns)
	require.Zero(t, v.ActiveRuns)
	require.False(t, v.CreatedAt.IsZero())

	raw := rawJSON(t, r.body)
	require.Equal(t, store.MaxQueuedRunsDefault, v.MaxQueuedRuns, "absent: the default")
	for _, k := range []string{"id", "budget", "waiting_runs", "active_runs", "weight", "exhausted", "max_concurrent_runs", "max_queued_runs", "api_key"} {
		require.Contains(t, raw, k)
	}
	budget := rawJSON(t, raw["budget"])
	for _, k := range []string{"tokens", "window", "used", "reserved", "window_start", "window_end"} {
		require.Contains(t, budget, k)
	}

	// The key works, and the tenant has its default agent.
	got := decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", v.APIKey, nil), http.StatusOK)
	require.Empty(t, got.APIKey, "the key is shown once")
	require.Equal(t, v.Budget, got.Budget)
	require.Equal(t, v.Weight, got.Weight)
	require.Equal(t, agentfleet.ExhaustedFail, got.Exhausted)
	run := e.createRun(v.APIKey, map[string]any{"message": "hi"})
	require.Equal(t, "acme", run.Tenant)

	// Defaults: unlimited, daily, weight 1, queue.
	d := decode[wire.TenantView](t, e.do("POST", "/v1/tenants", adminToken, map[string]any{"id": "plain"}), http.StatusCreated)
	require.Zero(t, d.Budget.Limit)
	require.Equal(t, agentfleet.WindowDay, d.Budget.Window)
	require.Equal(t, 1, d.Weight)
	require.Equal(t, agentfleet.ExhaustedQueue, d.Exhausted)
	require.Zero(t, d.MaxConcurrentRuns)
	require.NotEqual(t, v.APIKey, d.APIKey)

	// Other windows round-trip as given.
	for id, w := range map[string]string{"monthly": "month", "hourly": "1h", "weekly": "168h"} {
		tv := decode[wire.TenantView](t, e.do("POST", "/v1/tenants", adminToken,
			map[string]any{"id": id, "budget": map[string]any{"tokens": 10, "window": w}}), http.StatusCreated)
		require.EqualValues(t, w, tv.Budget.Window)
		got := decode[wire.TenantView](t, e.do("GET", "/v1/tenants/"+id, adminToken, nil), http.StatusOK)
		require.EqualValues(t, w, got.Budget.Window)
		require.EqualValues(t, 10, got.Budget.Limit)
	}
}

func TestTenantCreateValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		want   []string
	}{
		{"duplicate", `{"id":"acme"}`, 409, "conflict", []string{`tenant "acme" already exists`}},
		{"no id", `{}`, 422, "unprocessable", []string{`id ""`, "letters, digits"}},
		{"id with a dot", `{"id":"a.b"}`, 422, "unprocessable", []string{`id "a.b"`}},
		{"id with a space", `{"id":"a b"}`, 422, "unprocessable", []string{`id "a b"`}},
		{"id too long", `{"id":"` + strings.Repeat("x", 65) + `"}`, 422, "unprocessable", []string{"up to 64"}},
		{"window fortnight", `{"id":"n","budget":{"tokens":1,"window":"fortnight"}}`, 422, "unprocessable", []string{`budget.window "fortnight"`, `"day"`, `"month"`}},
		{"window 30s", `{"id":"n","budget":{"window":"30s"}}`, 422, "unprocessable", []string{`budget.window "30s"`, "at least 1m"}},
		{"window negative", `{"id":"n","budget":{"window":"-24h"}}`, 422, "unprocessable", []string{`budget.window "-24h"`}},
		{"negative tokens", `{"id":"n","budget":{"tokens":-1}}`, 422, "unprocessable", []string{"budget.tokens must not be negative"}},
		{"weight 0", `{"id":"n","weight":0}`, 422, "unprocessable", []string{"weight must be from 1 to 1000"}},
		{"weight 1001", `{"id":"n","weight":1001}`, 422, "unprocessable", []string{"weight must be from 1 to 1000"}},
		{"exhausted maybe", `{"id":"n","exhausted":"maybe"}`, 422, "unprocessable", []string{`"queue"`, `"fail"`}},
		{"negative max_concurrent_runs", `{"id":"n","max_concurrent_runs":-1}`, 422, "unprocessable", []string{"max_concurrent_runs must not be negative"}},
		{"negative tokens_per_minute", `{"id":"n","tokens_per_minute":-1}`, 422, "unprocessable", []string{"tokens_per_minute must not be negative"}},
		{"weight is a string", `{"id":"n","weight":"3"}`, 400, "bad_request", []string{`"weight"`, "integer"}},
		{"budget is a number", `{"id":"n","budget":5}`, 400, "bad_request", []string{`"budget"`, "an object"}},
		{"tokens is a string", `{"id":"n","budget":{"tokens":"lots"}}`, 400, "bad_request", []string{`"budget.tokens"`, "integer"}},
		{"unknown field", `{"id":"n","budget":{"tokens":1,"windows":"day"}}`, 400, "bad_request", []string{`unknown field "windows"`}},
		{"top-level unknown field", `{"id":"n","name":"N"}`, 400, "bad_request", []string{`unknown field "name"`}},
		{"malformed", `{"id":`, 400, "bad_request", []string{"malformed JSON"}},
		{"empty body", ``, 400, "bad_request", []string{"body is empty"}},
		{"body over 1 MiB", `{"id":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "payload_too_large", []string{"exceeds"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := e.sub(t)
			requireError(t, e.do("POST", "/v1/tenants", adminToken, c.body), c.status, c.code, c.want...)
		})
	}
	// None was created.
	requireError(t, e.do("GET", "/v1/tenants/n", adminToken, nil), http.StatusNotFound, "not_found", `no tenant "n"`)
}

func TestTenantGetCountsRunsAndBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	v := decode[wire.TenantView](t, e.do("POST", "/v1/tenants", adminToken,
		map[string]any{"id": "acme", "budget": map[string]any{"tokens": 1000, "window": "24h"}}), http.StatusCreated)
	key := v.APIKey
	// A duration window opens at first use: no bounds yet.
	raw := rawJSON(t, e.do("GET", "/v1/tenants/acme", key, nil).body)
	budget := rawJSON(t, raw["budget"])
	require.NotContains(t, budget, "window_start")
	require.NotContains(t, budget, "window_end")

	runs := make([]agentfleet.Run, 5)
	for i := range runs {
		runs[i] = e.createRun(key, map[string]any{"message": "m"})
	}
	e.start(runs[0].ID) // running
	e.start(runs[1].ID) // parked
	_, err := e.store.RunTransition(e.ctx, store.RunTransitionParams{ID: runs[1].ID, To: agentfleet.StatusWaitingBudget})
	require.NoError(t, err)
	e.complete(runs[2].ID) // ended
	// runs[3], runs[4] queued: neither active nor waiting

	// Budget: one call settled (used), one reserved.
	res, err := e.store.BudgetReserve(e.ctx, store.BudgetReserveParams{Tenant: "acme", RunID: runs[0].ID, Tokens: 300})
	require.NoError(t, err)
	_, err = e.store.BudgetSettle(e.ctx, store.BudgetSettleParams{ReservationID: res.ID, Model: "m1",
		Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}})
	require.NoError(t, err)
	_, err = e.store.BudgetReserve(e.ctx, store.BudgetReserveParams{Tenant: "acme", RunID: runs[0].ID, Tokens: 250})
	require.NoError(t, err)

	for _, tok := range []string{key, adminToken} {
		got := decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", tok, nil), http.StatusOK)
		require.Equal(t, 1, got.WaitingRuns)
		require.Equal(t, 2, got.ActiveRuns, "running and parked")
		require.EqualValues(t, 1000, got.Budget.Limit)
		require.EqualValues(t, 120, got.Budget.Used)
		require.EqualValues(t, 250, got.Budget.Reserved)
		require.Equal(t, agentfleet.BudgetWindow("24h"), got.Budget.Window)
		require.False(t, got.Budget.WindowStart.IsZero())
		require.Equal(t, 24*time.Hour, got.Budget.WindowEnd.Sub(got.Budget.WindowStart))
	}
	requireError(t, e.do("GET", "/v1/tenants/nope", adminToken, nil), http.StatusNotFound, "not_found", `no tenant "nope"`)
}

func TestTenantUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := decode[wire.TenantView](t, e.do("POST", "/v1/tenants", adminToken, map[string]any{
		"id": "acme", "budget": map[string]any{"tokens": 1000, "window": "day"},
		"tokens_per_minute": 50, "max_concurrent_runs": 2, "weight": 3, "exhausted": "queue",
	}), http.StatusCreated)
	key := created.APIKey
	changed := func() string { t.Helper(); return bustest.Recv(t, e.changed, "TenantChanged") }
	put := func(body any) wire.TenantView {
		t.Helper()
		return decode[wire.TenantView](t, e.do("PUT", "/v1/tenants/acme", adminToken, body), http.StatusOK)
	}
	want := created
	want.APIKey = ""
	same := func(got wire.TenantView) {
		t.Helper()
		require.True(t, got.UpdatedAt.After(want.UpdatedAt) || got.UpdatedAt.Equal(want.UpdatedAt))
		got.UpdatedAt, want.UpdatedAt = time.Time{}, time.Time{}
		require.Equal(t, want, got)
	}

	// Only the fields given change.
	got := put(map[string]any{"weight": 7})
	require.Equal(t, "acme", changed())
	want.Weight = 7
	same(got)

	got = put(map[string]any{"budget": map[string]any{"tokens": 500}})
	require.Equal(t, "acme", changed())
	want.Budget.Limit = 500
	same(got)

	got = put(map[string]any{"exhausted": "fail", "max_concurrent_runs": 0})
	require.Equal(t, "acme", changed())
	want.Exhausted, want.MaxConcurrentRuns = agentfleet.ExhaustedFail, 0
	same(got)

	monthOf := func(t time.Time) time.Time {
		t = t.UTC()
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	before := monthOf(time.Now())
	got = put(map[string]any{"budget": map[string]any{"window": "month"}, "tokens_per_minute": 0})
	require.Equal(t, "acme", changed())
	month := monthOf(time.Now())
	if !got.Budget.WindowStart.Equal(month) { // the test straddled a month's end
		month = before
	}
	want.Budget.Window, want.TokensPerMinute, want.Budget.TokensPerMinute = agentfleet.WindowMonth, 0, 0
	want.Budget.WindowStart, want.Budget.WindowEnd = got.Budget.WindowStart, got.Budget.WindowEnd
	require.Equal(t, month, got.Budget.WindowStart.UTC())
	same(got)

	// The body may name the tenant it updates, and an empty change is fine.
	same(put(map[string]any{"id": "acme"}))
	require.Equal(t, "acme", changed())
	same(put(map[string]any{}))
	require.Equal(t, "acme", changed())

	// The tenant sees the same.
	same(decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", key, nil), http.StatusOK))

	// Refused changes change nothing and wake nothing.
	for _, c := range []struct {
		path   string
		body   string
		status int
		code   string
		want   []string
	}{
		{"/v1/tenants/acme", `{"id":"other"}`, 422, "unprocessable", []string{`id in the body ("other") differs from the path ("acme")`, "cannot be renamed"}},
		{"/v1/tenants/acme", `{"weight":0}`, 422, "unprocessable", []string{"weight must be from 1 to 1000"}},
		{"/v1/tenants/acme", `{"weight":1001,"budget":{"tokens":5}}`, 422, "unprocessable", []string{"weight"}},
		{"/v1/tenants/acme", `{"budget":{"window":"fortnight"}}`, 422, "unprocessable", []string{"budget.window"}},
		{"/v1/tenants/acme", `{"budget":{"window":"30s"}}`, 422, "unprocessable", []string{"budget.window"}},
		{"/v1/tenants/acme", `{"exhausted":"maybe"}`, 422, "unprocessable", []string{"exhausted"}},
		{"/v1/tenants/acme", `{"budget":{"tokens":-1}}`, 422, "unprocessable", []string{"budget.tokens"}},
		{"/v1/tenants/acme", `{"weight":"heavy"}`, 400, "bad_request", []string{`"weight"`}},
		{"/v1/tenants/acme", `{"colour":"red"}`, 400, "bad_request", []string{`unknown field "colour"`}},
		{"/v1/tenants/acme", ``, 400, "bad_request", []string{"body is empty"}},
		{"/v1/tenants/nope", `{"weight":2}`, 404, "not_found", []string{`no tenant "nope"`}},
	} {
		requireError(t, e.do("PUT", c.path, adminToken, c.body), c.status, c.code, c.want...)
	}
	require.Empty(t, e.changed)
	same(decode[wire.TenantView](t, e.do("GET", "/v1/tenants/acme", adminToken, nil), http.StatusOK))
}

func TestTenantUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := e.tenant("acme")
	r1 := e.createRun(key, map[string]any{"message": "1"})
	r2 := e.createRun(key, map[string]any{"message": "2"})
	settle := func(run, model string, p, c int64) {
		t.Helper()
		res, err := e.store.BudgetReserve(e.ctx, store.BudgetReserveParams{Tenant: "acme", RunID: run, Tokens: p + c})
		require.NoError(t, err)
		_, err = e.store.BudgetSettle(e.ctx, store.BudgetSettleParams{ReservationID: res.ID, Tenant: res.Tenant, RunID: res.RunID, Model: model,
			Usage: agentfleet.Usage{PromptTokens: p, CompletionTokens: c}})
		require.NoError(t, err)
	}
	settle(r1.ID, "big", 100, 10)
	settle(r1.ID, "small", 5, 1)
	settle(r2.ID, "big", 200, 20)
	// Reserved but not settled: not usage.
	_, err := e.store.BudgetReserve(e.ctx, store.BudgetReserveParams{Tenant: "acme", RunID: r2.ID, Tokens: 999})
	require.NoError(t, err)
	// Another tenant's usage is not counted.
	keyB := e.tenant("globex")
	rb := e.createRun(keyB, map[string]any{"message": "b"})
	res, err := e.store.BudgetReserve(e.ctx, store.BudgetReserveParams{Tenant: "globex", RunID: rb.ID, Tokens: 10})
	require.NoError(t, err)
	_, err = e.store.BudgetSettle(e.ctx, store.BudgetSettleParams{ReservationID: res.ID, Tenant: res.Tenant, RunID: res.RunID, Model: "big", Usage: agentfleet.Usage{PromptTokens: 7}})
	require.NoError(t, err)

	byModel := wire.UsageReport{GroupBy: "model", Rows: []wire.UsageRow{
		{Key: "big", Usage: agentfleet.Usage{PromptTokens: 300, CompletionTokens: 30}, Calls: 2},
		{Key: "small", Usage: agentfleet.Usage{PromptTokens: 5, CompletionTokens: 1}, Calls: 1},
	}}
	for _, q := range []string{"", "?group_by=model"} {
		require.Equal(t, byModel, decode[wire.UsageReport](t, e.do("GET", "/v1/tenants/acme/usage"+q, key, nil), http.StatusOK))
	}
	byRun := decode[wire.UsageReport](t, e.do("GET", "/v1/tenants/acme/usage?group_by=run", adminToken, nil), http.StatusOK)
	require.Equal(t, "run", byRun.GroupBy)
	require.ElementsMatch(t, []wire.UsageRow{
		{Key: r1.ID, Usage: agentfleet.Usage{PromptTokens: 105, CompletionTokens: 11}, Calls: 2},
		{Key: r2.ID, Usage: agentfleet.Usage{PromptTokens: 200, CompletionTokens: 20}, Calls: 1},
	}, byRun.Rows)

	// since: all of it is after an hour ago, none after an hour from now.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	require.Equal(t, byModel, decode[wire.UsageReport](t, e.do("GET", "/v1/tenants/acme/usage?since="+past, key, nil), http.StatusOK))
	r := e.do("GET", "/v1/tenants/acme/usage?group_by=run&since="+future, key, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"group_by":"run","rows":[]}`, string(r.body))

	for _, c := range []struct{ q, want string }{
		{"?group_by=tenant", `group_by must be "model" or "run"`},
		{"?group_by=MODEL", `group_by must be "model" or "run"`},
		{"?since=yesterday", "since must be an RFC 3339 time"},
		{"?since=2026-01-02", "since must be an RFC 3339 time"},
	} {
		requireError(t, e.do("GET", "/v1/tenants/acme/usage"+c.q, key, nil), http.StatusBadRequest, "bad_request", c.want)
	}
	requireError(t, e.do("GET", "/v1/tenants/nope/usage", adminToken, nil), http.StatusNotFound, "not_found", `no tenant "nope"`)
}
