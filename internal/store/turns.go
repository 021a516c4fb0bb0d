package store

import (
	"encoding/json"
	"time"

	"github.com/agentfleet/agentfleet"
)

// TurnLoadParams says which turn of which run a worker is about to
// execute.
type TurnLoadParams struct {
	RunID string
	Turn  int
	// HistoryFrom is the first turn whose steps are loaded (the engine's
	// history window); steps are loaded only for Turn > 1.
	HistoryFrom int
}

// TurnLoadResult is what TurnLoad read.
type TurnLoadResult struct {
	Run agentfleet.Run
	// Started says this call moved the run from queued to running.
	Started bool
	// TenantUnlimited says the run's tenant had no token limit and no
	// per-minute limit when it was read, so the turn's model call has
	// nothing to reserve (see BudgetReserve). A limit set after the read
	// still applies at the charge (ModelReplyRecord, BudgetSettle).
	TenantUnlimited bool
	// SkillsRevision is the tenant's skills revision (SkillRevision) as
	// the load read it: 0 for a tenant that never had a skill. A worker
	// keeps its index of the tenant's skills current by it without a read
	// of its own.
	SkillsRevision int64
	// Steps are the run's steps from HistoryFrom through Run.Turn. They
	// are loaded only when Turn > 1 and the run stands at Turn-1
	// (HistoryLoaded); otherwise the turn is not the run's next one and
	// the caller does not execute it.
	Steps         []agentfleet.Step
	HistoryLoaded bool
}

// TurnCommitParams is one committed turn. Usage and DataBytesCarried are
// added to the run's totals. Status is the run's status after the turn
// (running to continue, or a terminal status with Answer or Error).
type TurnCommitParams struct {
	RunID            string
	Turn             int
	Steps            []agentfleet.Step
	Args             json.RawMessage
	Status           agentfleet.RunStatus
	Answer           json.RawMessage
	Error            string
	Usage            agentfleet.Usage
	DataBytesCarried int64
	Events           []agentfleet.Event
	// Spawned counts the children the turn's script spawned.
	Spawned int
	// WaitIDs, with Status waiting_children, are the children the run
	// waits for, until WaitUntil (zero: until they end). The commit
	// leaves the run running instead when every one has ended already.
	// The ids stay on the run until its next turn commits, which reads
	// the children's results.
	WaitIDs   []string
	WaitUntil time.Time
}

type StepListByRunParams struct {
	RunID    string
	FromTurn int // inclusive; zero: from the start
}

type EventAppendParams struct {
	RunID  string
	Events []agentfleet.Event
}

type EventListByRunParams struct {
	RunID    string
	AfterSeq int64
	Limit    int // zero: all
}
