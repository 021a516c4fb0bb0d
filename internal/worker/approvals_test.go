package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// turnRecorder is a Bus that records the turns enqueued on it.
type turnRecorder struct {
	Bus
	mu    sync.Mutex
	turns []bus.Turn
}

func (r *turnRecorder) EnqueueTurn(_ context.Context, t bus.Turn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.turns = append(r.turns, t)
	return nil
}

// A batch run whose approval was decided while its turn ran to the call
// again (the park finds it decided) has its turn enqueued again in the
// batch class, marked to reuse its reply: the worker's side of
// api.TestApprovalResumesABatchRunAsABatchTurn.
func TestParkOnADecidedApprovalKeepsTheBatchClass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "w.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	adm, err := st.BatchAdmit(ctx, store.BatchAdmitParams{Tenant: "acme", Agent: agentfleet.DefaultAgent})
	require.NoError(t, err)
	require.NoError(t, adm.Admission.Append(ctx, []store.BatchInput{{Index: 0, Message: "pay"}}))
	b, err := adm.Admission.Commit(ctx, store.BatchCommitParams{})
	require.NoError(t, err)
	runs, err := st.BatchRunList(ctx, store.BatchRunListParams{ID: b.ID, AfterIndex: -1})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run, err := st.RunTransition(ctx, store.RunTransitionParams{ID: runs[0].Run.ID, To: agentfleet.StatusRunning})
	require.NoError(t, err)

	call := agentfleet.ApprovalCall{Index: 0, Primitive: "fetch", Method: "POST", URL: "https://api.example.com/pay"}
	parked, err := st.ApprovalRequest(ctx, store.ApprovalRequestParams{RunID: run.Run.ID, Turn: 1, Call: call})
	require.NoError(t, err)
	require.True(t, parked.Parked)
	_, err = st.ApprovalDecide(ctx, store.ApprovalDecideParams{ID: parked.Approval.ID, Approve: true, DecidedBy: "test"})
	require.NoError(t, err)

	rec := &turnRecorder{}
	w := &Worker{cfg: Config{Store: st, Bus: rec}, log: slog.New(slog.DiscardHandler), agents: newAgentCache(st, AgentCacheTTL)}
	a := &attempt{ctx: ctx, f: facts{exec: &execFacts{res: loop.TurnResult{Turn: 1, Approval: &call}}}}
	ch, err := w.park(a, run.Run)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusRunning, ch.Run.Status, "nothing parked")
	require.Equal(t, []bus.Turn{{RunID: run.Run.ID, Tenant: "acme", Turn: 1, Wake: ch.Run.Wake, Retried: true, Batch: true}}, rec.turns,
		"the same turn again, reusing its reply, still a batch turn")
}
