// The ports: the small interfaces through which the model, the sandbox,
// the budget and the store come in, declared here where they are consumed.

package loop

import (
	"context"
	"errors"

	"github.com/agentfleet/agentfleet"
)

// Model is the chat model a turn calls.
type Model interface {
	Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error)
}

// Streamer is a Model that delivers its reply as it is produced
// (llm.Client's Stream): content deltas, then a Done chunk with the whole
// response. A turn whose TurnInput.OnChunk is set streams its model call
// through it; a script's ai() sub-calls never stream.
type Streamer interface {
	Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error)
}

// Sandbox runs one turn's script in isolation.
type Sandbox interface {
	Execute(ctx context.Context, req agentfleet.ExecRequest) (agentfleet.ExecResult, error)
	// Declarations documents the given primitives (nil: the default
	// set) as TypeScript declarations for the system prompt; secret
	// adds secret(), for an agent that names a secret exposed to
	// scripts.
	Declarations(primitives []string, secret bool) string
}

// MCPDeclarer is a Sandbox that serves agents' MCP servers: it lists
// their tools (through its cache) for the prompt's declarations. A
// Sandbox without it runs no MCP tools, and the prompt declares none.
type MCPDeclarer interface {
	MCPDeclarations(ctx context.Context, req agentfleet.ExecRequest) string
}

// Meter holds tenants' token budgets. Reserve refuses with a
// *agentfleet.BudgetExhaustedError when the tenant has no budget left.
// ReserveUnlimited is Reserve for a tenant the caller already knows to be
// unlimited: it holds nothing and asks no one, and its reservation settles
// like any other.
type Meter interface {
	Reserve(ctx context.Context, tenant, runID string, tokens int64) (agentfleet.Reservation, error)
	ReserveUnlimited(tenant, runID string, tokens int64) agentfleet.Reservation
	Settle(ctx context.Context, res agentfleet.Reservation, usage agentfleet.Usage, model string) error
	Release(ctx context.Context, res agentfleet.Reservation) error
}

// Reply is a turn's recorded model output.
type Reply struct {
	RunID         string
	Turn          int
	Content       string
	Model         string
	Usage         agentfleet.Usage
	UsageReported bool
}

// Recorder records model replies before their scripts run.
type Recorder interface {
	// RecordedReply returns the reply recorded for a turn, if any.
	RecordedReply(ctx context.Context, runID string, turn int) (Reply, bool, error)
	// RecordReply records a reply. When the turn already has one, that
	// one is returned with existed set. It fails with ErrStale when the
	// run has moved past the turn or ended. When charge is set, the
	// reply's usage settles that reservation in the same write, and
	// charged says it did; otherwise the caller settles it.
	RecordReply(ctx context.Context, r Reply, charge *agentfleet.Reservation) (rec Reply, existed, charged bool, err error)
}

// Journal keeps the side-effect journal (docs/ARCHITECTURE.md §4): each
// side-effecting call of a script, recorded with its outcome before the
// script sees it.
type Journal interface {
	// JournalList returns the entries recorded for a turn, by index.
	JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error)
	// JournalRecord records an entry; one recorded already stays, and
	// existed says so. It fails with ErrStale when the run has moved
	// past the turn or ended. When charge is set, the entry's usage (of
	// model) settles that reservation in the same write, and charged
	// says it did.
	JournalRecord(ctx context.Context, e agentfleet.JournalEntry, charge *agentfleet.Reservation, model string) (existed, charged bool, err error)
}

// ErrStale means the turn was already committed (or the run ended) by
// someone else: the caller should not commit, only re-publish what the
// commit owed.
var ErrStale = errors.New("turn already committed or run ended")

// ErrRejected means the store refused what a turn would record as
// malformed (an entry no schema takes): writing it again cannot help, so
// the engine gives up at once instead of retrying (retryRecord), and the
// turn fails with the store's reason.
var ErrRejected = errors.New("the store refused the record")
