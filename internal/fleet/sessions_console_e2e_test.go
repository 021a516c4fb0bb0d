package fleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/wire"
)

// TestConsoleSessions: the sessions page lists a tenant's sessions; a
// session's page shows its runs as a conversation (each message, then
// its answer or error, markup as text) with links to the runs; a run's
// page links to its session. The admin token names the tenant.
func TestConsoleSessions(t *testing.T) {
	br := browsertest.Start(t)
	f := setupFleetWith(t, fleetOptions{workers: 1, responder: func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		usage := agentfleet.Usage{PromptTokens: 50, CompletionTokens: 10}
		for _, m := range r.Messages {
			if m.Role == agentfleet.RoleUser && strings.Contains(m.Content, "forever") {
				return "Carrying on.\n```javascript\nfunction run(args) { return {more: true} }\n```", usage, nil
			}
		}
		return "Answering.\n```javascript\nfunction run(args) { answer('hi ' + " + fmt.Sprintf("%q", xss) + ") }\n```", usage, nil
	}})
	url := f.dispatcher.URL()
	hello := f.submit(wire.RunCreateRequest{Message: "hello " + xss, SessionID: "talk"})
	require.Equal(t, agentfleet.StatusCompleted, f.wait(hello.ID, 30*time.Second).Status)
	stuck := f.submit(wire.RunCreateRequest{Message: "keep going forever", SessionID: "talk", MaxTurns: 1})
	require.Equal(t, agentfleet.StatusMaxTurns, f.wait(stuck.ID, 30*time.Second).Status)
	other := f.submit(wire.RunCreateRequest{Message: "hello again", SessionID: "other"})
	require.Equal(t, agentfleet.StatusCompleted, f.wait(other.ID, 30*time.Second).Status)
	sessionRow := func(id string) string { return fmt.Sprintf(`tr[data-key=%q]`, id) }
	exchange := func(id string) string { return fmt.Sprintf(`article.exchange[data-run=%q]`, id) }

	p := signIn(t, br, url, f.tenantKey)
	p.Click(`#nav a[href="#/sessions"]`)
	p.WaitVisible(sessionRow("talk"))
	p.WaitVisible(sessionRow("other"))
	talk := p.Text(sessionRow("talk"))
	require.Contains(t, talk, "default")
	require.Contains(t, talk, "max turns", "its last run's status")
	require.Equal(t, "2", p.Text(sessionRow("talk")+" td:nth-child(3)"), "two runs")
	p.Screenshot(t.ArtifactDir(), "sessions")

	p.Click(sessionRow("talk") + " td:first-child a")
	p.WaitVisible(exchange(stuck.ID))
	p.WaitText(".page.session h1", "Session talk")
	require.Contains(t, p.Text(exchange(hello.ID)+" .block.task"), "hello "+xss, "the message, as text")
	require.Contains(t, p.Text(exchange(hello.ID)+" .block.answer"), "hi "+xss, "the answer, as text")
	require.Contains(t, p.Text(exchange(stuck.ID)+" .block.task"), "keep going forever")
	require.NotEmpty(t, p.Text(exchange(stuck.ID)+" .block.error"), "the error of the run that ran out of turns")
	require.False(t, browsertest.Eval[bool](p, `!!window.__pwned`))
	p.Screenshot(t.ArtifactDir(), "session")

	// A run of it links back to the session.
	p.Click(exchange(hello.ID) + " h2 a")
	p.WaitVisible(`dd[data-fact="session"] a`)
	p.WaitText(`dd[data-fact="status"]`, "completed")
	p.Click(`dd[data-fact="session"] a`)
	p.WaitVisible(exchange(stuck.ID))
	requireClean(t, p)

	admin := signIn(t, br, url, "admin-secret")
	admin.Click(`#nav a[href="#/sessions"]`)
	admin.WaitVisible("#sessions-tenant")
	admin.Type("#sessions-tenant", "acme")
	admin.Click(".tenant-pick button[type=submit]")
	admin.WaitVisible(sessionRow("other"))
	admin.WaitText(".page.sessions h1", "Sessions of acme")
	admin.Click(sessionRow("other") + " td:first-child a")
	admin.WaitVisible(exchange(other.ID))
	requireClean(t, admin)
}
