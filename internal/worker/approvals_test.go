package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
)

// The turn a park enqueues when its approval was decided meanwhile: the
// same turn, reusing its reply, in the run's class.
func TestDecidedTurn(t *testing.T) {
	t.Parallel()
	run := agentfleet.Run{ID: "r1", Tenant: "acme", Turn: 2, Wake: 5}
	require.Equal(t, bus.Turn{RunID: "r1", Tenant: "acme", Turn: 3, Wake: 5, Retried: true}, decidedTurn(run))
	run.BatchID = "b1"
	require.Equal(t, bus.Turn{RunID: "r1", Tenant: "acme", Batch: true, Turn: 3, Wake: 5, Retried: true}, decidedTurn(run),
		"a batch run's turn stays a batch turn")
}
