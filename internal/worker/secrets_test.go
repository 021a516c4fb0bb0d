package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/skills"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// memSecrets is a SecretSource of tenants' secrets held in memory, or
// failing with err.
type memSecrets struct {
	mu      sync.Mutex
	tenants map[string][]agentfleet.OpenSecret
	err     error
	loads   int
}

func (m *memSecrets) TenantSecrets(_ context.Context, tenant string, _ []string) ([]agentfleet.OpenSecret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	if m.err != nil {
		return nil, m.err
	}
	return m.tenants[tenant], nil
}

// A turn gets its tenant's secrets from the SecretSource: its script
// reads the exposed one, and the step, the events and the next prompt
// show [secret:<name>]. When the source fails, the attempt is retried
// (the run goes on), saying why.
func TestTurnGetsTheTenantsSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "w.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	sb, err := sandbox.New(sandbox.Config{PoolSize: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	model := llm.NewScripted(
		llm.Reply{Content: "```javascript\nfunction run() { log('using ' + secret('sign')); return {k: secret('sign')} }\n```"},
		llm.Reply{Content: "done"},
	)
	eng, err := loop.New(loop.Config{Model: model, Sandbox: sb})
	require.NoError(t, err)

	_, err = st.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	_, err = st.AgentUpsert(ctx, store.AgentUpsertParams{Tenant: "acme", Name: "signer", Spec: agentfleet.AgentSpec{Secrets: []string{"sign"}}})
	require.NoError(t, err)
	created, err := st.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Agent: "signer", Message: "sign"})
	require.NoError(t, err)
	ld, err := st.TurnLoad(ctx, store.TurnLoadParams{RunID: created.Run.ID, Turn: 1, HistoryFrom: 1})
	require.NoError(t, err)

	const value = "sign-VALUE-4b3a2910"
	src := &memSecrets{err: errors.New("database is away")}
	w := &Worker{cfg: Config{Store: st, Engine: eng, SecretSource: src}, log: slog.New(slog.DiscardHandler), agents: newAgentCache(st, AgentCacheTTL),
		skills: skills.NewLibraries(st)}
	attemptOf := func(ld store.TurnLoadResult) *attempt {
		return &attempt{ctx: ctx, turnCtx: ctx, baseCtx: ctx, ld: ld, f: facts{
			turn: bus.Turn{RunID: ld.Run.ID, Tenant: "acme", Turn: ld.Run.Turn + 1}, firstAttempt: true,
			load: &loadFacts{run: ld.Run, historyLoaded: true},
		}}
	}

	a := attemptOf(ld)
	a.f.exec = w.execute(a)
	require.ErrorContains(t, a.f.exec.err, "load the secrets of tenant acme for run "+ld.Run.ID+" (its agent signer names 1): database is away")
	v := decide(a.f)
	require.Equal(t, settleRetry, v.settle, "the attempt, not the run")
	require.Equal(t, 2, model.Remaining(), "no model call")

	src.mu.Lock()
	src.err = nil
	src.tenants = map[string][]agentfleet.OpenSecret{"acme": {{Secret: agentfleet.Secret{Name: "sign", Expose: true}, Value: value}}}
	src.mu.Unlock()
	x := w.execute(a)
	require.NoError(t, x.err)
	res := x.res
	require.Equal(t, loop.OutcomeContinue, res.Outcome)
	doc, _ := json.Marshal(res)
	require.NotContains(t, string(doc), value)
	require.Contains(t, res.Steps[1].Content, "using [secret:sign]")
	require.JSONEq(t, `{"k":"[secret:sign]"}`, string(res.Args))

	// The next turn's prompt is built from what was recorded.
	ch, err := st.TurnCommit(ctx, store.TurnCommitParams{RunID: ld.Run.ID, Turn: 1, Steps: res.Steps, Args: res.Args, Status: res.Status, Usage: res.Usage, Events: res.Events})
	require.NoError(t, err)
	next, ld2 := w.inPlace(a.f.turn, ch, ld)
	a2 := attemptOf(ld2)
	a2.f.turn = next
	x = w.execute(a2)
	require.NoError(t, x.err)
	reqs := model.Requests()
	require.Len(t, reqs, 2)
	prompt, _ := json.Marshal(reqs[1].Messages)
	require.NotContains(t, string(prompt), value)
	require.Contains(t, string(prompt), "using [secret:sign]")
	require.Equal(t, 3, src.loads)
}
