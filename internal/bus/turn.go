package bus

import (
	"fmt"
	"strconv"

	"github.com/agentfleet/agentfleet"
)

// Turn is the envelope of one turn to execute, the payload of every message
// on the turn queues: {"run_id","tenant","turn","wake"}, and "direct" on
// some in AF_WORK. Everything else about the run is in the store; the
// message only says which turn is due.
type Turn struct {
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant"`
	// Turn is the number of the turn to execute, from 1.
	Turn int `json:"turn"`
	// Wake is agentfleet.Run.Wake: how often the run was parked and
	// resumed. It makes a resumed turn's message id differ from the
	// parked one, which the duplicate window would otherwise drop.
	Wake int `json:"wake"`
	// Direct is set by the scheduler on a turn it forwarded while no
	// other tenant's turn waited for the workers: the turn after it may
	// skip the scheduler, run at once by the same worker or sent straight
	// to AF_WORK (see ContinueTurn).
	// The message id does not include it.
	Direct bool `json:"direct,omitempty"`
	// Retried is set on a turn that a redelivery of the turn before it
	// published: an attempt of this turn may have run already, in place
	// under that earlier message, and recorded its model reply, so the
	// worker looks for that reply even on this message's first delivery
	// rather than pay the model again. The message id does not include
	// it.
	Retried bool `json:"retried,omitempty"`
	// Batch marks a turn of a batch run: the scheduler serves a tenant's
	// other turns first (batch runs are its lower priority class). The
	// message id does not include it.
	Batch bool `json:"batch,omitempty"`
	// Traceparent is the W3C trace context of the turn that sent this
	// one, carried as the message's traceparent header (not in the
	// envelope, nor in the message id).
	Traceparent string `json:"-"`
}

// FirstTurn is the message of run's first turn: its admission, a
// session's next run, a spawned child, a released batch run. Every turn
// of a run is built here or by NextTurn, so a batch run's turns all
// carry Batch and a resumed run's its Wake.
func FirstTurn(run agentfleet.Run) Turn {
	return Turn{RunID: run.ID, Tenant: run.Tenant, Turn: 1, Wake: run.Wake, Batch: run.BatchID != ""}
}

// NextTurn is the message of the turn after run's last committed one
// (run.Turn+1): a run continuing, or resuming from a wait.
func NextTurn(run agentfleet.Run) Turn {
	t := FirstTurn(run)
	t.Turn = run.Turn + 1
	return t
}

// traceHeader is the NATS header that carries Turn.Traceparent.
const traceHeader = "traceparent"

// MsgID is the JetStream message id of the turn: "<run>/turn/<n>", plus
// "/w<wake>" for a resumed turn. Publishing the same turn twice within the
// duplicate window stores it once.
func (t Turn) MsgID() string {
	id := t.RunID + "/turn/" + strconv.Itoa(t.Turn)
	if t.Wake > 0 {
		id += "/w" + strconv.Itoa(t.Wake)
	}
	return id
}

func (t Turn) validate() error {
	if err := validRun(t.Tenant, t.RunID); err != nil {
		return err
	}
	if t.Turn < 1 {
		return fmt.Errorf("turn number %d: turns count from 1", t.Turn)
	}
	if t.Wake < 0 {
		return fmt.Errorf("wake %d: must not be negative", t.Wake)
	}
	return nil
}
