package rules

import "github.com/agentfleet/agentfleet/internal/store/driver"

// Store is the store's semantics written once over a driver.Driver: for
// each noun that has moved behind the driver seam it validates the
// params, runs the driver's primitives (in one transaction where the
// call writes more than one row or reads before it writes) and wraps
// their errors with what was asked. A backend embeds it and implements
// the methods that have not moved yet itself.
//
// Moved (one file per noun): tenants, API keys and skills (tenant.go),
// agents (agent.go), callbacks (callback.go),
// triggers (trigger.go), approvals (approval.go), batches (batch.go; not
// BatchAdmit), run transitions and cancels (run.go), run, step, event
// and reply reads and EventAppend (runread.go), a run's end and its
// children (children.go), retention (retention.go), and of the budget
// BudgetGet, TenantUpdate, BudgetRelease, BudgetExpire, UsageList and
// JournalListByRun (budget.go), and ModelReplyRecord and JournalRecord
// over each driver's one fenced insert (recorded.go, driver.Recorder),
// and BudgetSettle over each driver's LedgerSettle (budget.go).
//
// Not moved, still per backend: the throughput path (RunCreate,
// TurnLoad, TurnCommit, TurnCommitMany: PostgreSQL's group commit and
// pipeline), BudgetReserve (PostgreSQL rolls the window inside the
// statement that takes the row lock) and BatchAdmit (the COPY
// admission).
type Store struct {
	d driver.Driver
	// Queue gates tenants' max_queued_runs: RunCreate and BatchAdmit
	// (in the backends) admit through it, TenantUpdate forgets a tenant
	// whose cap changed.
	Queue QueueGate
}

// NewStore returns the semantics over d.
func NewStore(d driver.Driver) *Store { return &Store{d: d} }
