package rules

import "github.com/agentfleet/agentfleet/internal/store/driver"

// Store is the store's semantics written once over a driver.Driver: for
// every method of store.Store it validates the params, runs the driver's
// primitives (in one transaction where the call writes more than one row
// or reads before it writes), decides what a fenced write that did
// nothing means, and wraps errors with what was asked. A backend embeds
// it and holds only connection setup, migrations and the SQL of the
// primitives.
//
// One file per noun: tenants, API keys and skills (tenant.go), agents
// (agent.go), callbacks (callback.go), triggers (trigger.go), approvals
// (approval.go), batches (batch.go, the admission in admit.go), secrets
// and the rekey's walk over every sealed value (secret.go), run
// creation (runcreate.go), turn loads (turnload.go), turn commits
// (turncommit.go), run transitions and cancels (run.go), reads and
// EventAppend (runread.go), a run's end and its children (children.go),
// retention (retention.go), sessions, read from their runs (session.go),
// the budget (budget.go, the reservation in
// reserve.go), and the turn's records (recorded.go). The throughput
// path's primitives are coarse (driver.RunCreator, TurnLoader,
// TurnCommitter, Reserver, Admitter, Recorder) so PostgreSQL keeps its
// one-trip statements and pipeline and SQLite its group commit.
type Store struct {
	d driver.Driver
	// Queue gates tenants' max_queued_runs: RunCreate and BatchAdmit
	// admit through it, TenantUpdate forgets a tenant whose cap changed.
	Queue QueueGate
}

// NewStore returns the semantics over d.
func NewStore(d driver.Driver) *Store { return &Store{d: d} }
