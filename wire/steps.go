package wire

import "github.com/agentfleet/agentfleet"

// RunSteps is GET /v1/runs/{id}/steps: a run's trace in turn order, its
// steps (the message, the model's replies, the scripts' observations)
// and its journal (the side-effecting calls its scripts made, each with
// what it returned, which a turn executed again replays).
type RunSteps struct {
	RunID   string                    `json:"run_id"`
	Steps   []agentfleet.Step         `json:"steps"`
	Journal []agentfleet.JournalEntry `json:"journal"`
}
