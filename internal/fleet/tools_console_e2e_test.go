package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/wire"
)

// TestConsoleToolEvents: a run's page shows, in its turn, each call of an
// OpenAPI module as a tool call (the operation, method and URL, the body
// sent) and its result (the status, the body that came back, as text).
func TestConsoleToolEvents(t *testing.T) {
	br := browsertest.Start(t)
	api := newBillingAPI(t)
	f := setupFleetWith(t, fleetOptions{responder: billingTurns, workers: 1,
		sandbox: sandbox.Config{Network: sandbox.NetworkConfig{Allow: testEgress.Allow, RootCAs: x509Pool(t, api.srv)}}})
	f.putAgent("biller", map[string]any{
		"openapi": []any{map[string]any{"name": "billing", "spec": billingDocument(api.srv.URL)}},
	})
	run := f.submit(wire.RunCreateRequest{Agent: "biller", Message: "refund invoice in_1"})
	done := f.wait(run.ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, done.Status, done.Error)

	p := signIn(t, br, f.dispatcher.URL(), f.tenantKey)
	p.Navigate(f.dispatcher.URL() + "/#/runs/" + run.ID)
	const turn1 = `section.turn[data-turn="1"] `
	p.WaitVisible(turn1 + ".block.tool.result")
	p.WaitText(`dd[data-fact="status"]`, "completed")
	calls := browsertest.Eval[[]string](p, `[...document.querySelectorAll('section.turn[data-turn="1"] .block.tool h3')].map((e) => e.textContent)`)
	require.Equal(t, []string{
		"Tool call api:billing.getInvoice GET " + api.srv.URL + "/v1/invoices/in_1?expand=lines",
		"Tool result api:billing.getInvoice 200",
		"Tool call api:billing.issueCredit POST " + api.srv.URL + "/v1/invoices/in_1/credits",
		"Tool result api:billing.issueCredit 201",
		"Tool call api:billing.createRefund POST " + api.srv.URL + "/v1/invoices/in_1/refunds",
		"Tool result api:billing.createRefund 201",
	}, calls)
	bodies := browsertest.Eval[[]string](p, `[...document.querySelectorAll('section.turn[data-turn="1"] .block.tool details pre')].map((e) => e.textContent)`)
	require.Contains(t, bodies, `{"amount":1}`, "the body sent")
	require.Contains(t, bodies[0], `"path":"/v1/invoices/in_1"`, "the body that came back")
	p.Screenshot(t.ArtifactDir(), "tool-events")
	requireClean(t, p)
}
