package fleet_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// payee counts the payments it receives, by path.
type payee struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]int
}

func newPayee(t *testing.T) *payee {
	p := &payee{got: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		p.mu.Lock()
		p.got[r.Method+" "+r.URL.Path]++
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *payee) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[key]
}

// payTurns plays an agent that pays: "pay X" posts to the payee's /X and
// answers the status, or the error it caught; "note and pay X" posts to
// /note first.
func payTurns(payeeURL string) fakeserver.Responder {
	return func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
		task, note := strings.CutPrefix(r.FirstUser(), "note and ")
		what, ok := strings.CutPrefix(task, "pay ")
		if !ok {
			return "", usage, fmt.Errorf("unexpected task %q", r.FirstUser())
		}
		before := ""
		if note {
			before = fmt.Sprintf(`http.post(%q + "/note", {about: %q});`, payeeURL, what)
		}
		script := fmt.Sprintf(`function run() {
  const http = require("http");
  log("paying %[2]s");
  %[3]s
  try { answer("paid " + http.post(%[1]q + "/%[2]s", {amount: 5, card: "sk-card-123"}).status) }
  catch (e) { answer("refused: " + e.message) }
}`, payeeURL, what, before)
		return "Paying.\n```javascript\n" + script + "\n```", usage, nil
	}
}

// awaitStatus polls a run until it is in status st.
func (f *testFleet) awaitStatus(id string, st agentfleet.RunStatus) agentfleet.Run {
	f.t.Helper()
	var run agentfleet.Run
	require.Eventually(f.t, func() bool {
		var err error
		run, err = f.tenant.GetRun(f.ctx, id)
		require.NoError(f.t, err)
		return run.Status == st
	}, 30*time.Second, 20*time.Millisecond, "run %s never reached %s (last %s)", id, st, run.Status)
	return run
}

// pendingFor is the one pending approval of run id.
func (f *testFleet) pendingFor(id string) wire.ApprovalView {
	f.t.Helper()
	f.awaitStatus(id, agentfleet.StatusWaitingApproval)
	page, err := f.tenant.ListApprovals(f.ctx, client.ListApprovalsParams{Status: "pending", RunID: id})
	require.NoError(f.t, err)
	require.Len(f.t, page.Approvals, 1)
	return page.Approvals[0]
}

// The approval path through the API: a run's http.post that its agent's
// approve rules cover parks the run (waiting_approval, nothing committed,
// nothing sent, the agent's approval_callback_url told, signed); approved,
// the turn runs again on its recorded reply and the POST goes out once;
// denied or expired, the call throws what the script catches. A grant for
// the session lets the same call through in the session's next run.
func TestFleetApprovals(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			pay := newPayee(t)
			o := fleetOptions{responder: payTurns(pay.srv.URL), sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow}}}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			approvals(t, setupFleetWith(t, o), pay)
		})
	}
}

func approvals(t *testing.T, f *testFleet, pay *payee) {
	notices := newReceiver(t, http.StatusOK)
	secret, err := f.tenant.RotateCallbackSecret(f.ctx, "acme")
	require.NoError(t, err)
	for name, spec := range map[string]agentfleet.AgentSpec{
		"payer":     {Approve: []string{"http.post " + pay.srv.URL + "/*"}, ApprovalCallbackURL: notices.srv.URL},
		"hasty":     {Approve: []string{"http.post"}, ApprovalTimeout: agentfleet.Duration(500 * time.Millisecond)},
		"depositor": {Approve: []string{"http.post " + pay.srv.URL + "/deposit"}},
	} {
		_, err := f.store.AgentUpsert(f.ctx, store.AgentUpsertParams{Tenant: "acme", Name: name, Spec: spec})
		require.NoError(t, err)
	}

	// Park.
	run := f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay rent"})
	a := f.pendingFor(run.ID)
	require.Equal(t, "http", a.Primitive)
	require.Equal(t, "POST", a.Method)
	require.Equal(t, pay.srv.URL+"/rent", a.URL)
	require.Contains(t, a.Preview, `"amount":5`)
	require.Equal(t, 1, a.Turn)
	require.Equal(t, "pending", a.Status)
	require.Zero(t, pay.count("POST /rent"), "nothing goes out before the yes")
	parked, err := f.tenant.GetRun(f.ctx, run.ID)
	require.NoError(t, err)
	require.Zero(t, parked.Turn, "the turn waits uncommitted")
	var requested *agentfleet.Event
	for _, ev := range f.events(run.ID) {
		if ev.Type == agentfleet.EventApprovalRequested {
			requested = &ev
		}
	}
	require.NotNil(t, requested, "an approval_requested event")
	require.Contains(t, requested.Summary, a.ID)
	require.Contains(t, string(requested.Args), `"url":"`+pay.srv.URL+`/rent"`)

	// The agent's approval_callback_url is told, signed like a run
	// callback.
	n := notices.next(t)
	require.NoError(t, webhook.Verify(webhook.Standard, []string{secret.CallbackSecret}, n.header, n.body, time.Now()))
	require.Equal(t, "approval_"+a.ID, n.header.Get(webhook.HeaderStandardID))
	var told wire.ApprovalView
	require.NoError(t, json.Unmarshal(n.body, &told))
	require.Equal(t, a.ID, told.ID)
	require.Equal(t, "pending", told.Status)

	// Approve: the turn runs again and the call proceeds, once.
	got, err := f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{Reason: "rent is due"})
	require.NoError(t, err)
	require.Equal(t, "approved", got.Status)
	require.Equal(t, "default", got.DecidedBy, "the tenant's first key, by name")
	done := f.wait(run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, `"paid 201"`, string(done.Answer))
	require.Equal(t, 1, pay.count("POST /rent"))
	require.Equal(t, 1, f.modelCalls("pay rent", 1), "the turn run again reuses its recorded reply")
	f.requireOneCommitPerTurn(done)
	_, err = f.tenant.Deny(f.ctx, a.ID, wire.ApprovalDecision{})
	require.Equal(t, http.StatusConflict, statusOf(err), "deciding twice")

	// What the turn did before the call is journaled: run again, it is
	// replayed, not repeated, and the approved call goes out once.
	run = f.submit(wire.RunCreateRequest{Agent: "depositor", Message: "note and pay deposit"})
	a = f.pendingFor(run.ID)
	require.Equal(t, 1, pay.count("POST /note"))
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{})
	require.NoError(t, err)
	require.JSONEq(t, `"paid 201"`, string(f.wait(run.ID, 30*time.Second).Answer))
	require.Equal(t, 1, pay.count("POST /note"), "exactly once: replayed from the journal")
	require.Equal(t, 1, pay.count("POST /deposit"))

	// Deny: the call throws, with the reason, and the script catches it.
	run = f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay casino"})
	a = f.pendingFor(run.ID)
	_, err = f.admin.Deny(f.ctx, a.ID, wire.ApprovalDecision{Reason: "not with our money"})
	require.NoError(t, err, "the admin decides for any tenant")
	done = f.wait(run.ID, 30*time.Second)
	require.JSONEq(t, fmt.Sprintf(`"refused: http POST %s/casino was denied: not with our money"`, pay.srv.URL), string(done.Answer))
	require.Zero(t, pay.count("POST /casino"))
	v, err := f.tenant.GetApproval(f.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "admin", v.DecidedBy)

	// Expire: nobody decides within the agent's approval_timeout.
	run = f.submit(wire.RunCreateRequest{Agent: "hasty", Message: "pay later"})
	done = f.wait(run.ID, 30*time.Second)
	require.JSONEq(t, fmt.Sprintf(`"refused: http POST %s/later was denied: expired"`, pay.srv.URL), string(done.Answer))
	exp, err := f.tenant.ListApprovals(f.ctx, client.ListApprovalsParams{RunID: run.ID})
	require.NoError(t, err)
	require.Equal(t, "denied", exp.Approvals[0].Status)
	require.Equal(t, "system", exp.Approvals[0].DecidedBy)

	// Session scope: 422 for a run without a session...
	run = f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay tax"})
	a = f.pendingFor(run.ID)
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{Scope: "session"})
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(err))
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{})
	require.NoError(t, err)
	f.wait(run.ID, 30*time.Second)
	// ... and for a session, the same call later in it does not ask again.
	run = f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay rent", SessionID: "lease"})
	a = f.pendingFor(run.ID)
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{Scope: "session"})
	require.NoError(t, err)
	require.JSONEq(t, `"paid 201"`, string(f.wait(run.ID, 30*time.Second).Answer))
	again := f.wait(f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay rent", SessionID: "lease"}).ID, 30*time.Second)
	require.JSONEq(t, `"paid 201"`, string(again.Answer))
	none, err := f.tenant.ListApprovals(f.ctx, client.ListApprovalsParams{RunID: again.ID})
	require.NoError(t, err)
	require.Empty(t, none.Approvals, "granted for the session: no new approval")
	require.Equal(t, 3, pay.count("POST /rent"))
	elsewhere := f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay rent", SessionID: "other"})
	f.pendingFor(elsewhere.ID)

	// Another tenant sees none of it.
	other, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "umbrella"})
	require.NoError(t, err)
	oc := apiClient(t, f.dispatcher.URL(), other.APIKey)
	list, err := oc.ListApprovals(f.ctx, client.ListApprovalsParams{})
	require.NoError(t, err)
	require.Empty(t, list.Approvals)
	_, err = oc.Approve(f.ctx, a.ID, wire.ApprovalDecision{})
	require.Equal(t, http.StatusNotFound, statusOf(err))
	all, err := f.admin.ListApprovals(f.ctx, client.ListApprovalsParams{Status: "pending"})
	require.NoError(t, err)
	require.Len(t, all.Approvals, 1, "the admin lists every tenant's")
	require.Equal(t, 7, f.metric(0, "agentfleet_approvals_requested_total", "tenant", "acme")+f.metric(1, "agentfleet_approvals_requested_total", "tenant", "acme"),
		"each park counted by the worker that parked it")
}

// bank quotes an amount (GET /quote) and counts what is posted to it,
// by path and body.
type bank struct {
	srv   *httptest.Server
	mu    sync.Mutex
	quote string
	posts map[string]int
}

func newBank(t *testing.T) *bank {
	b := &bank{quote: "10", posts: map[string]int{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		defer b.mu.Unlock()
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, b.quote)
			return
		}
		b.posts[r.Method+" "+r.URL.Path+" "+string(body)]++
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *bank) setQuote(q string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.quote = q
}

func (b *bank) received() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.posts)
}

// bankTurns plays an agent that pays what the bank quotes ("quote and
// pay": a GET, then an http.post of the amount), or wires money with
// fetch ("wire URL": fetch(URL, {method: "POST"})); it answers the
// status, or the error it caught.
func bankTurns(bankURL string) fakeserver.Responder {
	return func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		usage := agentfleet.Usage{PromptTokens: 40, CompletionTokens: 10}
		var do string
		switch task := r.FirstUser(); {
		case task == "quote and pay":
			do = fmt.Sprintf(`const http = require("http");
  const amount = http.get(%[1]q + "/quote").body;
  return "paid " + http.post(%[1]q + "/pay", "amount=" + amount).status;`, bankURL)
		case strings.HasPrefix(task, "wire "):
			do = fmt.Sprintf(`return "wired " + fetch(%q, {method: "POST", body: "transfer all"}).status;`, strings.TrimPrefix(task, "wire "))
		default:
			return "", usage, fmt.Errorf("unexpected task %q", task)
		}
		script := "function pay() {\n  " + do + "\n}\nfunction run() {\n  try { answer(pay()) } catch (e) { answer(\"refused: \" + e.message) }\n}"
		return "Paying.\n```javascript\n" + script + "\n```", usage, nil
	}
}

// An approval binds the request: a turn run again whose request differs
// from the one approved (the amount it GETs changed meanwhile) asks again
// and sends nothing until that is decided. One grammar: fetch with a
// POST is an http.post. A URL rule matches the canonical request; a URL
// with userinfo is refused before any rule or network.
func TestFleetApprovalsBindTheRequest(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			bk := newBank(t)
			o := fleetOptions{responder: bankTurns(bk.srv.URL), sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow}}}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			approvalsBind(t, setupFleetWith(t, o), bk)
		})
	}
}

func approvalsBind(t *testing.T, f *testFleet, bk *bank) {
	port := bk.srv.Listener.Addr().(*net.TCPAddr).Port
	for name, spec := range map[string]agentfleet.AgentSpec{
		"payer":  {Approve: []string{"http.post"}},
		"wirer":  {Approve: []string{"http.post"}},
		"sinker": {Approve: []string{fmt.Sprintf("fetch:POST http://127.0.0.1:%d/*", port)}},
	} {
		_, err := f.store.AgentUpsert(f.ctx, store.AgentUpsertParams{Tenant: "acme", Name: name, Spec: spec})
		require.NoError(t, err)
	}

	// The approval shows amount=10; the turn run again GETs 999999.
	run := f.submit(wire.RunCreateRequest{Agent: "payer", Message: "quote and pay"})
	first := f.pendingFor(run.ID)
	require.Equal(t, "amount=10", first.Preview)
	require.Len(t, first.RequestDigest, 64)
	bk.setQuote("999999")
	_, err := f.tenant.Approve(f.ctx, first.ID, wire.ApprovalDecision{Reason: "10 is fine"})
	require.NoError(t, err)
	// The changed call asks again: a new approval, the run parked again.
	var again wire.ApprovalView
	require.Eventually(t, func() bool {
		page, err := f.tenant.ListApprovals(f.ctx, client.ListApprovalsParams{Status: "pending", RunID: run.ID})
		require.NoError(t, err)
		if len(page.Approvals) == 0 {
			return false
		}
		again = page.Approvals[0]
		return true
	}, 30*time.Second, 20*time.Millisecond, "the changed request asks again")
	f.awaitStatus(run.ID, agentfleet.StatusWaitingApproval)
	require.NotEqual(t, first.ID, again.ID)
	require.Equal(t, first.CallIndex, again.CallIndex)
	require.Equal(t, first.URL, again.URL)
	require.Equal(t, "amount=999999", again.Preview)
	require.NotEqual(t, first.RequestDigest, again.RequestDigest)
	require.Empty(t, bk.received(), "nothing was sent under the approval of another request")
	_, err = f.tenant.Deny(f.ctx, again.ID, wire.ApprovalDecision{Reason: "not that much"})
	require.NoError(t, err)
	done := f.wait(run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)
	require.JSONEq(t, fmt.Sprintf(`"refused: http POST %s/pay was denied: not that much"`, bk.srv.URL), string(done.Answer))
	require.Empty(t, bk.received())
	require.Equal(t, 1, f.modelCalls("quote and pay", 1), "each attempt reuses the recorded reply")
	v, err := f.tenant.GetApproval(f.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, "approved", v.Status, "the first decision stands, for its own request only")

	// The same request again is what was approved: it goes out, once.
	bk.setQuote("10")
	run = f.submit(wire.RunCreateRequest{Agent: "payer", Message: "quote and pay"})
	a := f.pendingFor(run.ID)
	_, err = f.tenant.Approve(f.ctx, a.ID, wire.ApprovalDecision{})
	require.NoError(t, err)
	require.JSONEq(t, `"paid 201"`, string(f.wait(run.ID, 30*time.Second).Answer))
	require.Equal(t, map[string]int{"POST /pay amount=10": 1}, bk.received())

	// fetch with {method: "POST"} is an http.post.
	run = f.submit(wire.RunCreateRequest{Agent: "wirer", Message: "wire " + bk.srv.URL + "/transfer"})
	a = f.pendingFor(run.ID)
	require.Equal(t, "fetch", a.Primitive)
	require.Equal(t, "POST", a.Method)
	require.Equal(t, "transfer all", a.Preview)
	_, err = f.tenant.Deny(f.ctx, a.ID, wire.ApprovalDecision{Reason: "no"})
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`"refused: fetch POST %s/transfer was denied: no"`, bk.srv.URL), string(f.wait(run.ID, 30*time.Second).Answer))

	// Spellings of a covered URL are covered; userinfo is refused.
	for _, u := range []string{
		fmt.Sprintf("http://127.0.0.1.:%d/sink", port),
		fmt.Sprintf("http://127.0.0.1:%d/a/../sink", port),
		fmt.Sprintf("HTTP://127.0.0.1:0%d/%%73ink", port),
	} {
		run = f.submit(wire.RunCreateRequest{Agent: "sinker", Message: "wire " + u})
		a = f.pendingFor(run.ID)
		require.Equal(t, bk.srv.URL+"/sink", a.URL, u)
		_, err = f.tenant.Deny(f.ctx, a.ID, wire.ApprovalDecision{})
		require.NoError(t, err)
		f.wait(run.ID, 30*time.Second)
	}
	done = f.wait(f.submit(wire.RunCreateRequest{Agent: "sinker", Message: fmt.Sprintf("wire http://u@127.0.0.1:%d/sink", port)}).ID, 30*time.Second)
	require.JSONEq(t, `"refused: fetch: a URL with a user name or password (user@host) is refused; send credentials in a header such as Authorization"`, string(done.Answer))
	require.Empty(t, done.Error)
	list, err := f.tenant.ListApprovals(f.ctx, client.ListApprovalsParams{RunID: done.ID})
	require.NoError(t, err)
	require.Empty(t, list.Approvals, "refused before any rule")
	require.Equal(t, map[string]int{"POST /pay amount=10": 1}, bk.received(), "nothing else went out")
}

// statusOf is the HTTP status of a client error (0 for none).
func statusOf(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// The console's approvals: the pending approvals page lists a waiting
// call and approves it (with a reason); the run page denies another.
func TestConsoleApprovals(t *testing.T) {
	br := browsertest.Start(t)
	pay := newPayee(t)
	f := setupFleetWith(t, fleetOptions{responder: payTurns(pay.srv.URL), sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow}}})
	_, err := f.store.AgentUpsert(f.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "payer", Spec: agentfleet.AgentSpec{Approve: []string{"http.post"}}})
	require.NoError(t, err)
	url := f.dispatcher.URL()

	run := f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay rent"})
	a := f.pendingFor(run.ID)
	p := signIn(t, br, url, f.tenantKey)
	p.Click(`#nav a[href="#/approvals"]`)
	rowSel := fmt.Sprintf(`tr[data-key=%q]`, a.ID)
	p.WaitVisible(rowSel + `[data-state="pending"]`)
	require.Contains(t, p.Text(rowSel), pay.srv.URL+"/rent")
	require.Contains(t, p.Text(rowSel), `"amount":5`)
	p.Screenshot(t.ArtifactDir(), "approvals")
	p.Type(rowSel+` input[name="reason"]`, "rent is due")
	p.Click(fmt.Sprintf(`button[aria-label="Approve %s"]`, a.ID))
	p.WaitVisible(rowSel + `[data-state="approved"]`)
	done := f.wait(run.ID, 30*time.Second)
	require.JSONEq(t, `"paid 201"`, string(done.Answer))
	v, err := f.tenant.GetApproval(f.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "rent is due", v.Reason)

	run = f.submit(wire.RunCreateRequest{Agent: "payer", Message: "pay casino"})
	b := f.pendingFor(run.ID)
	p.Navigate(url + "/#/runs/" + run.ID)
	p.WaitVisible(fmt.Sprintf(`.decide[data-approval=%q]`, b.ID))
	p.Click(fmt.Sprintf(`button[aria-label="Deny %s"]`, b.ID))
	done = f.wait(run.ID, 30*time.Second)
	require.JSONEq(t, fmt.Sprintf(`"refused: http POST %s/casino was denied: no reason given (decided by default)"`, pay.srv.URL), string(done.Answer))
	p.WaitJS("the decided request has no buttons", fmt.Sprintf(`!document.querySelector('.decide[data-approval=%q]')`, b.ID))
	require.Zero(t, pay.count("POST /casino"))
	requireClean(t, p)
}
