package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api/apitest"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// xss is markup a tenant or a model might write; the console must show
// it as text. Were it ever HTML, the image would fail to load and its
// handler would set window.__pwned (unless the policy stopped it, which
// the page would report as a violation).
const xss = `<img src=x onerror="window.__pwned=1">`

// consoleModel answers the console tests' tasks:
//   - "compute N": three turns (log and carry {n, items}, double n,
//     answer "result 2N+1");
//   - "hold N": the same, but its second model call waits for release(N),
//     so a test sees the run while it runs;
//   - "spin": a script that loops until the run is cancelled;
//   - "... xss": markup in the reply's prose, a log line and the answer.
type consoleModel struct {
	mu    sync.Mutex
	gates map[int]chan struct{}
}

func (m *consoleModel) gate(n int) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gates[n] == nil {
		m.gates[n] = make(chan struct{})
	}
	return m.gates[n]
}

func (m *consoleModel) release(n int) { close(m.gate(n)) }

func (m *consoleModel) releaseAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, g := range m.gates {
		select {
		case <-g:
		default:
			close(g)
		}
		delete(m.gates, n)
	}
}

func (m *consoleModel) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	task := r.FirstUser()
	usage := agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}
	switch {
	case strings.HasSuffix(task, "xss"):
		if assistantTurns(r) == 0 {
			return "Look: " + xss + "\n```javascript\nfunction run(args) { log('" + xss + "'); return {note: '" + xss + "'} }\n```", usage, nil
		}
		return "```javascript\nfunction run(args) { answer(args.note) }\n```", usage, nil
	case task == "spin":
		return "Spinning.\n```javascript\nfunction run(args) { while (true) {} }\n```", usage, nil
	}
	n, err := taskNumber(strings.Replace(task, "hold ", "compute ", 1))
	if err != nil {
		return "", agentfleet.Usage{}, err
	}
	switch assistantTurns(r) {
	case 0:
		return fmt.Sprintf("First I set things up.\n```javascript\n// the input\nfunction run(args) {\n  log('start');\n  return {n: %d, items: [1, 2, 3]};\n}\n```", n), usage, nil
	case 1:
		if strings.HasPrefix(task, "hold") {
			<-m.gate(n)
		}
		return "Now double it.\n```javascript\nfunction run(args) { return {n: args.n * 2, items: args.items} }\n```", usage, nil
	default:
		return "And answer.\n```javascript\nfunction run(args) { answer('result ' + (args.n + 1)) }\n```", usage, nil
	}
}

// signIn opens the console in a new tab and signs in with token.
func signIn(t *testing.T, br *browsertest.Browser, url, token string) *browsertest.Page {
	t.Helper()
	p := br.NewPage(t)
	p.Navigate(url + "/")
	p.WaitVisible("#token")
	p.Type("#token", token)
	p.Click("#signin button[type=submit]")
	p.WaitVisible("table.runs")
	return p
}

// requireClean asserts the page threw nothing and broke no policy.
func requireClean(t *testing.T, p *browsertest.Page) {
	t.Helper()
	for _, m := range p.Messages() {
		require.False(t, strings.HasPrefix(m, "exception:"), "uncaught exception: %s", m)
		require.NotContains(t, m, "Content Security Policy")
	}
	require.Empty(t, p.CSPViolations())
}

func row(id string) string { return fmt.Sprintf(`tr[data-run=%q]`, id) }

// TestConsole drives the console in headless Chromium against a fleet:
// sign in, a run appears and completes live, its page shows its turns as
// they happen, a run is cancelled, a budget bar moves, and markup that
// tenants and models wrote stays text. Screenshots of each page go to
// the test's artifact directory (go test -artifacts keeps them).
func TestConsole(t *testing.T) {
	br := browsertest.Start(t)
	m := &consoleModel{gates: map[int]chan struct{}{}}
	limit := int64(100_000)
	f := setupFleetWith(t, fleetOptions{responder: m.respond,
		tenant: wire.TenantRequest{ID: "acme", Budget: &wire.BudgetSpec{Tokens: &limit}}})
	t.Cleanup(m.releaseAll) // before the fleet stops
	url := f.dispatcher.URL()
	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)

	t.Run("Headers", func(t *testing.T) {
		resp, err := http.Get(url + "/")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	})

	t.Run("SignIn", func(t *testing.T) {
		p := br.NewPage(t)
		p.Navigate(url + "/")
		p.WaitVisible("#token")
		p.Screenshot(shots, "signin")
		p.Type("#token", "not-a-key")
		p.Click("#signin button[type=submit]")
		p.WaitText("#signin .error", "does not know this token")
		require.Empty(t, browsertest.Eval[string](p, `sessionStorage.getItem('agentfleet.token') || ''`), "a refused token is not kept")
		browsertest.Eval[bool](p, `(document.getElementById('token').value = '', true)`)
		p.Type("#token", f.tenantKey)
		p.Click("#signin button[type=submit]")
		p.WaitVisible("table.runs")
		require.Equal(t, f.tenantKey, browsertest.Eval[string](p, `sessionStorage.getItem('agentfleet.token')`))
		require.Empty(t, browsertest.Eval[string](p, `document.cookie`), "no cookie")
		require.NotContains(t, browsertest.Eval[string](p, `location.href`), f.tenantKey, "never in a URL")
		requireClean(t, p)
	})

	t.Run("RunAppearsAndCompletesLive", func(t *testing.T) {
		p := signIn(t, br, url, f.tenantKey)
		p.WaitVisible(`.live[data-state="live"]`)
		run := f.submit(wire.RunCreateRequest{Message: "hold compute 3"})
		p.WaitVisible(row(run.ID))
		p.WaitVisible(row(run.ID) + `[data-status="running"]`)
		p.Screenshot(shots, "runs-running")
		m.release(3)
		p.WaitVisible(row(run.ID) + `[data-status="completed"]`)
		p.WaitText(row(run.ID)+" td.turns", "3")
		p.WaitText(row(run.ID)+" td.tokens", "360")
		p.Screenshot(shots, "runs")
		requireClean(t, p)
	})

	t.Run("RunTurnByTurn", func(t *testing.T) {
		p := signIn(t, br, url, f.tenantKey)
		run := f.submit(wire.RunCreateRequest{Message: "hold compute 5"})
		p.WaitVisible(row(run.ID) + " td.id a")
		p.Click(row(run.ID) + " td.id a")
		// Its first turn is there while the second waits for the model.
		p.WaitVisible(`.turn[data-turn="1"] .block.digest`)
		require.Contains(t, p.Text(`.turn[data-turn="1"] .call h3`), "100 prompt + 20 completion tokens")
		require.Contains(t, p.Text(`.turn[data-turn="1"] .log`), "start")
		require.Contains(t, p.Text(`.turn[data-turn="1"] .digest-text`), "{items: number[3], n: number}")
		require.Equal(t, "function", p.Text(`.turn[data-turn="1"] pre.code .tok-kw`), "the code is highlighted")
		require.Equal(t, "// the input", p.Text(`.turn[data-turn="1"] pre.code .tok-com`))
		require.Equal(t, "log", p.Text(`.turn[data-turn="1"] pre.code .tok-prim`))
		require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('.turn[data-turn="3"]').length`), "turn 3 has not happened")
		p.WaitText(`.live`, "live")
		p.Screenshot(shots, "run-running")

		m.release(5)
		p.WaitVisible(`.turn[data-turn="3"] .block.answer`)
		require.Contains(t, p.Text(`.turn[data-turn="3"] .block.answer`), "result 11")
		p.WaitVisible(`dd[data-fact="status"] [data-status="completed"]`)
		p.WaitText(`.run-head .block.answer`, "result 11")
		p.WaitText(`dd[data-fact="tokens"]`, "300 prompt + 60 completion")
		require.Contains(t, p.Text(`.timeline li:last-child`), "done")
		p.Screenshot(shots, "run")
		requireClean(t, p)
	})

	t.Run("Cancel", func(t *testing.T) {
		p := signIn(t, br, url, f.tenantKey)
		run := f.submit(wire.RunCreateRequest{Message: "spin"})
		p.WaitVisible(row(run.ID) + `[data-status="running"] button.cancel`)
		p.Click(row(run.ID) + " button.cancel")
		p.WaitVisible(row(run.ID) + `[data-status="cancelled"]`)
		require.Equal(t, agentfleet.StatusCancelled, f.wait(run.ID, browsertest.Timeout).Status)
		requireClean(t, p)
	})

	t.Run("BudgetBar", func(t *testing.T) {
		p := signIn(t, br, url, f.tenantKey)
		p.Click(`#nav a[href="#/tenants"]`)
		meter := `.tenant[data-tenant="acme"] .meter`
		p.WaitVisible(meter)
		before := browsertest.Eval[int](p, `+document.querySelector('`+meter+`').getAttribute('aria-valuenow')`)
		require.Equal(t, int(limit), browsertest.Eval[int](p, `+document.querySelector('`+meter+`').getAttribute('aria-valuemax')`))
		width := `parseFloat(document.querySelector('` + meter + ` .used').style.width)`
		require.InDelta(t, 100*float64(before)/float64(limit), browsertest.Eval[float64](p, width), 0.01)

		run := f.submit(wire.RunCreateRequest{Message: "compute 4"})
		require.Equal(t, agentfleet.StatusCompleted, f.wait(run.ID, browsertest.Timeout).Status)
		p.WaitJS("the bar shows the run's 360 tokens", fmt.Sprintf(`+document.querySelector('%s').getAttribute('aria-valuenow') >= %d`, meter, before+360))
		require.Greater(t, browsertest.Eval[float64](p, width), 100*float64(before)/float64(limit))
		p.Screenshot(shots, "tenants")
		requireClean(t, p)

		// The admin sees every tenant.
		_, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "globex"})
		require.NoError(t, err)
		admin := signIn(t, br, url, "admin-secret")
		admin.Click(`#nav a[href="#/tenants"]`)
		admin.WaitVisible(`.tenant[data-tenant="globex"] .budget.unlimited`)
		admin.WaitVisible(`.tenant[data-tenant="acme"] .meter`)
		admin.Screenshot(shots, "tenants-admin")
		requireClean(t, admin)
	})

	t.Run("MarkupStaysText", func(t *testing.T) {
		p := signIn(t, br, url, f.tenantKey)
		// Submitted through the console's own form.
		p.Click("details.new-run summary")
		p.Type("form.submit textarea", xss+" xss")
		p.Click("form.submit button[type=submit]")
		p.WaitJS("the run is listed", `[...document.querySelectorAll('td.message')].some((td) => td.textContent.includes('onerror'))`)
		// The list redraws live: find the run's own row, not the first.
		id := browsertest.Eval[string](p, `[...document.querySelectorAll('table.runs tbody tr')].find((tr) => tr.querySelector('td.message')?.textContent.includes('onerror'))?.dataset.run || ''`)
		require.NotEmpty(t, id)
		p.Click(row(id) + " td.id a")
		p.WaitVisible(`dd[data-fact="status"] [data-status="completed"]`)
		p.WaitVisible(`.turn[data-turn="2"] .block.answer`)

		for _, sel := range []string{".run-head .task", `.turn[data-turn="1"] .log`, `.turn[data-turn="1"] .reply .prose`,
			`.turn[data-turn="2"] .block.answer`, ".run-head .block.answer"} {
			require.Contains(t, p.Text(sel), xss, "%s shows the markup as text", sel)
		}
		require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('img').length`), "no element was made of the markup")
		require.False(t, browsertest.Eval[bool](p, `'__pwned' in window`), "the handler never ran")
		p.Click(`#nav a[href="#/runs"]`)
		p.WaitVisible(row(id))
		require.Contains(t, p.Text(row(id)+" td.message"), xss)
		require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('img').length`))
		require.False(t, browsertest.Eval[bool](p, `'__pwned' in window`))
		requireClean(t, p)
	})

	t.Run("Triggers", func(t *testing.T) {
		tv, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{Name: new("numbers"), Scheme: new("github"),
			Events: &[]string{"issues.opened"}, Message: new("compute {{.payload.issue.number}}")})
		require.NoError(t, err)
		p := signIn(t, br, url, f.tenantKey)
		p.Click(`#nav a[href="#/triggers"]`)
		link := fmt.Sprintf(`tr[data-key=%q] a`, tv.ID)
		p.WaitVisible(link)
		p.Click(link)
		p.WaitText(".run-head h1", "numbers")

		// A delivery that comes while the page is open appears on it.
		res := sendHook(t, apiClient(t, url, ""), tv, tv.Secret, "gh-7", "issues", []byte(`{"action":"opened","issue":{"number":7}}`))
		require.Equal(t, http.StatusAccepted, res.Status)
		p.WaitJS("the delivery is listed as accepted", `[...document.querySelectorAll('tbody tr')].some((tr) => tr.textContent.includes('gh-7') && tr.dataset.state === 'accepted')`)
		runLink := fmt.Sprintf(`a[href="#/runs/%s"]`, res.Answer.RunID)
		p.WaitVisible(runLink)
		p.Screenshot(shots, "trigger")
		p.Click(runLink)
		p.WaitText(".run-head .task", "compute 7")
		requireClean(t, p)
	})

	t.Run("Batches", func(t *testing.T) {
		b, err := f.tenant.CreateBatch(f.ctx, wire.BatchCreateRequest{Inputs: []wire.BatchInput{
			{Message: "compute 1", CustomID: "one"}, {Message: "compute 2", CustomID: "two"}, {Message: "hold compute 4", CustomID: "held"}}})
		require.NoError(t, err)
		p := signIn(t, br, url, f.tenantKey)
		p.Click(`#nav a[href="#/batches"]`)
		batchLink := fmt.Sprintf(`tr[data-key=%q] a`, b.ID)
		p.WaitVisible(batchLink)
		p.Click(batchLink)
		// Two of three end while the third is held: the bar and the
		// results show it, in input order, then the last one ends.
		p.WaitVisible(`.batch-progress[data-done="2"][data-total="3"]`)
		p.WaitVisible(`tr[data-index="0"][data-status="completed"]`)
		require.Contains(t, p.Text(`tr[data-index="1"]`), "two")
		p.Screenshot(shots, "batch-running")
		m.release(4)
		p.WaitVisible(`.run-head[data-status="completed"]`)
		p.WaitVisible(`tr[data-index="2"][data-status="completed"]`)
		p.WaitVisible(`.batch-progress[data-done="3"]`)
		p.Screenshot(shots, "batch")
		requireClean(t, p)
	})

	t.Run("Paging", func(t *testing.T) {
		// 120 runs of a tenant of their own, recorded in the store alone
		// (no turn queued), so nothing runs them.
		tv, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "pages"})
		require.NoError(t, err)
		for i := range 120 {
			p := store.RunCreateParams{Tenant: "pages", Agent: agentfleet.DefaultAgent, Message: fmt.Sprintf("compute %d", i)}
			if i < 20 {
				p.SessionID = "batch-a"
			}
			_, err := f.store.RunCreate(f.ctx, p)
			require.NoError(t, err)
		}
		p := signIn(t, br, url, tv.APIKey)
		rows := `document.querySelectorAll('table.runs tbody tr').length`
		p.WaitJS("a page of 50", rows+` === 50`)
		require.Contains(t, p.Text("table.runs tbody tr:first-child td.message"), "compute 119", "newest first")
		p.Click("button.more")
		p.WaitJS("two pages", rows+` === 100`)
		p.Click("button.more")
		p.WaitJS("every run", rows+` === 120`)
		p.WaitJS("no more pages", `document.querySelector('button.more').hidden`)
		require.Contains(t, p.Text("table.runs tbody tr:last-child td.message"), "compute 0")

		p.Type(`form.filters input[name="session_id"]`, "batch-a")
		p.Click(`form.filters button[type=submit]`)
		p.WaitJS("the session's runs alone", rows+` === 20`)
		require.Contains(t, browsertest.Eval[string](p, `location.hash`), "session_id=batch-a")
		requireClean(t, p)
	})
}

// cutBody ends a response body with an error after limit bytes, as a
// connection that breaks would.
type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection cut by the test")
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

type cuttingTransport struct {
	limit int
	opens atomic.Int64
}

func (c *cuttingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.URL.Path == "/v1/events" {
		c.opens.Add(1)
		resp.Body = &cutBody{ReadCloser: resp.Body, left: c.limit}
	}
	return resp, err
}

// TestTenantEventsResumeAcrossBrokenStreams: client.TenantEvents over a
// stream that breaks every couple of events gets every event of every
// run of the tenant exactly once, each run's in seq order, resuming
// with Last-Event-ID each time.
func TestTenantEventsResumeAcrossBrokenStreams(t *testing.T) {
	t.Parallel()
	f := setupFleet(t, threeTurns, 0)
	var runs []agentfleet.Run
	for i := range 5 {
		runs = append(runs, f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i)}))
	}
	for _, r := range runs {
		f.wait(r.ID, 30*time.Second)
	}

	tr := &cuttingTransport{limit: 1500}
	c := apiClient(t, f.dispatcher.URL(), f.tenantKey)
	c.HTTP = &http.Client{Transport: apitest.Transport(t, tr)}
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	got := map[string][]int64{}
	ended := 0
	var lastPos uint64
	err := c.TenantEvents(ctx, client.TenantEventsParams{FromOldest: true}, func(ev client.TenantEvent) error {
		require.Greater(t, ev.Pos, lastPos, "positions increase")
		lastPos = ev.Pos
		got[ev.Event.RunID] = append(got[ev.Event.RunID], ev.Event.Seq)
		if ev.Event.Terminal() {
			if ended++; ended == len(runs) {
				return client.ErrStopEvents
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, tr.opens.Load(), int64(len(runs)), "the stream broke and was resumed many times")
	require.Len(t, got, len(runs))
	for _, r := range runs {
		want := []int64{}
		for _, ev := range f.events(r.ID) {
			want = append(want, ev.Seq)
		}
		require.Equal(t, want, got[r.ID], "run %s: every event once, in order", r.ID)
	}
}
