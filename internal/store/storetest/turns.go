package storetest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testTurnCommit(t *testing.T, newStore NewStore) {
	t.Run("Commit", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
		b.transition(t, r.ID, agentfleet.StatusRunning)

		p := commitParams(r.ID, 1, agentfleet.StatusRunning, "t1")
		res, err := b.s.TurnCommit(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, 1, res.Run.Turn)
		require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
		require.Equal(t, p.Args, res.Run.Args)
		require.Equal(t, p.Usage, res.Run.Usage)
		require.Equal(t, int64(7), res.Run.DataBytesCarried)
		require.Equal(t, int64(3), res.Run.EventSeq)
		require.Nil(t, res.SessionNext)
		requireSeqs(t, res.Events, 2)
		for _, e := range res.Events {
			require.Equal(t, r.ID, e.RunID)
			require.Equal(t, ten.ID, e.Tenant)
			require.Equal(t, 1, e.Turn)
		}
		require.Equal(t, res.Run, b.get(t, r.ID))

		steps := b.steps(t, r.ID)
		require.Len(t, steps, 3, "the user step and the turn's two")
		for i, s := range steps[1:] {
			require.Equal(t, r.ID, s.RunID)
			require.Equal(t, 1, s.Turn)
			require.Equal(t, i, s.Index)
			require.Equal(t, p.Steps[i].Kind, s.Kind)
			require.Equal(t, p.Steps[i].Content, s.Content)
			require.Equal(t, p.Steps[i].Usage, s.Usage)
		}
		require.Equal(t, "m1", steps[1].Model)
		// The result holds the steps as they read back, for a worker
		// that goes on to the next turn without loading its history.
		require.Len(t, res.Steps, 2)
		for i, s := range res.Steps {
			stored := steps[1+i]
			require.True(t, stored.CreatedAt.Equal(s.CreatedAt), "step %d created %s, stored %s", i, s.CreatedAt, stored.CreatedAt)
			s.CreatedAt = stored.CreatedAt
			require.Equal(t, stored, s, "step %d", i)
		}

		// A turn without new args keeps the carried state; usage adds up.
		res, err = b.s.TurnCommit(b.ctx, store.TurnCommitParams{RunID: r.ID, Turn: 2, Status: agentfleet.StatusRunning,
			Usage: agentfleet.Usage{PromptTokens: 1, CompletionTokens: 1}, DataBytesCarried: 3})
		require.NoError(t, err)
		require.Equal(t, p.Args, res.Run.Args)
		require.Equal(t, agentfleet.Usage{PromptTokens: 11, CompletionTokens: 6}, res.Run.Usage)
		require.Equal(t, int64(10), res.Run.DataBytesCarried)
		require.Empty(t, res.Events)

		last := commitParams(r.ID, 3, agentfleet.StatusCompleted, "t3")
		last.Answer = json.RawMessage(`{"haiku": "..."}`)
		res, err = b.s.TurnCommit(b.ctx, last)
		require.NoError(t, err)
		require.Equal(t, agentfleet.StatusCompleted, res.Run.Status)
		require.Equal(t, last.Answer, res.Run.Answer)
		require.Equal(t, last.Args, res.Run.Args)
		require.Equal(t, 3, res.Run.Turn)

		steps, err = b.s.StepListByRun(b.ctx, store.StepListByRunParams{RunID: r.ID, FromTurn: 3})
		require.NoError(t, err)
		require.Len(t, steps, 2)
		require.Equal(t, 3, steps[0].Turn)
	})
	t.Run("Fence", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		before := b.get(t, r.ID)
		stepsBefore, eventsBefore := b.steps(t, r.ID), b.events(t, r.ID)

		for name, p := range map[string]store.TurnCommitParams{
			"same turn again": commitParams(r.ID, 1, agentfleet.StatusRunning, "again"),
			"a turn ahead":    commitParams(r.ID, 3, agentfleet.StatusRunning, "ahead"),
		} {
			_, err := b.s.TurnCommit(b.ctx, p)
			require.ErrorIs(t, err, store.ErrConflict, name)
		}
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, 2, agentfleet.StatusQueued, "illegal"))
		require.ErrorIs(t, err, store.ErrInvalid, "running -> queued")
		_, err = b.s.TurnCommit(b.ctx, commitParams("nope", 1, agentfleet.StatusRunning, "x"))
		require.ErrorIs(t, err, store.ErrNotFound)
		for name, p := range map[string]store.TurnCommitParams{
			"turn zero":      {RunID: r.ID, Turn: 0, Status: agentfleet.StatusRunning},
			"unknown status": {RunID: r.ID, Turn: 2, Status: "sleeping"},
			"bad args":       {RunID: r.ID, Turn: 2, Status: agentfleet.StatusRunning, Args: json.RawMessage(`{`)},
			"negative usage": {RunID: r.ID, Turn: 2, Status: agentfleet.StatusRunning, Usage: agentfleet.Usage{PromptTokens: -1}},
			"step of another turn": {RunID: r.ID, Turn: 2, Status: agentfleet.StatusRunning,
				Steps: []agentfleet.Step{{Turn: 5, Kind: agentfleet.StepModel}}},
		} {
			_, err := b.s.TurnCommit(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		require.Equal(t, before, b.get(t, r.ID), "losers change nothing")
		require.Equal(t, stepsBefore, b.steps(t, r.ID))
		require.Equal(t, eventsBefore, b.events(t, r.ID))

		b.transition(t, r.ID, agentfleet.StatusFailed)
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, 2, agentfleet.StatusRunning, "late"))
		require.ErrorIs(t, err, store.ErrConflict, "the run ended")
	})
	t.Run("ConcurrentSameTurn", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for round := range 5 {
			r := b.started(t, ten.ID)
			const n = 6
			results, errs := atOnce(n, func(i int) (store.RunChangeResult, error) {
				return b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, fmt.Sprint("w", i)))
			})
			winner := -1
			for i := range n {
				if errs[i] == nil {
					require.Equal(t, -1, winner, "round %d: two commits of one turn won", round)
					winner = i
					continue
				}
				require.ErrorIs(t, errs[i], store.ErrConflict)
			}
			require.NotEqual(t, -1, winner, "round %d: nobody won", round)
			tag := fmt.Sprint("w", winner)
			steps := b.steps(t, r.ID)
			require.Len(t, steps, 3, "only the winner's steps")
			require.Equal(t, "reply "+tag, steps[1].Content)
			evs := b.events(t, r.ID)
			require.Len(t, evs, 2, "only the winner's events")
			require.Equal(t, tag, evs[0].Content)
			requireSeqs(t, evs, 1)
			got := b.get(t, r.ID)
			require.Equal(t, results[winner].Run, got)
			require.Equal(t, agentfleet.Usage{PromptTokens: 10, CompletionTokens: 5}, got.Usage, "usage counted once")
		}
	})
}

// sized is a commit of turn with n steps and n events, each telling its
// position.
func sized(runID string, turn, n int) store.TurnCommitParams {
	p := store.TurnCommitParams{RunID: runID, Turn: turn, Status: agentfleet.StatusRunning}
	for i := range n {
		p.Steps = append(p.Steps, agentfleet.Step{Kind: agentfleet.StepObservation, Content: fmt.Sprintf("s%d.%d", turn, i),
			Usage: agentfleet.Usage{PromptTokens: int64(i)}})
		ev := agentfleet.Event{Type: agentfleet.EventLog, Content: fmt.Sprintf("e%d.%d", turn, i), Summary: fmt.Sprint(i)}
		if i%3 == 0 {
			ev.Tokens = &agentfleet.Tokens{Prompt: int64(i), Completion: 1}
		}
		if i%5 == 0 {
			ev.Args = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
		}
		p.Events = append(p.Events, ev)
	}
	return p
}

// requireSized checks that a run's trace and events are exactly those of
// sized commits of the given sizes, turn after turn, in order.
func requireSized(t *testing.T, b bundle, runID string, sizes []int) {
	t.Helper()
	steps, evs := b.steps(t, runID), b.events(t, runID)
	wantSteps, wantEvents := 1, 0 // the user step
	for turn, n := range sizes {
		for i := range n {
			s := steps[wantSteps]
			require.Equal(t, turn+1, s.Turn)
			require.Equal(t, i, s.Index)
			require.Equal(t, fmt.Sprintf("s%d.%d", turn+1, i), s.Content)
			require.Equal(t, int64(i), s.Usage.PromptTokens)
			wantSteps++
			e := evs[wantEvents]
			require.Equal(t, fmt.Sprintf("e%d.%d", turn+1, i), e.Content)
			require.Equal(t, turn+1, e.Turn)
			require.Equal(t, fmt.Sprint(i), e.Summary)
			if i%3 == 0 {
				require.Equal(t, &agentfleet.Tokens{Prompt: int64(i), Completion: 1}, e.Tokens)
			} else {
				require.Nil(t, e.Tokens)
			}
			if i%5 == 0 {
				require.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), string(e.Args))
			} else {
				require.Nil(t, e.Args)
			}
			wantEvents++
		}
	}
	require.Len(t, steps, wantSteps)
	require.Len(t, evs, wantEvents)
	requireSeqs(t, evs, 1)
}

func testTurnCommitSizes(t *testing.T, newStore NewStore) {
	t.Run("Sizes", func(t *testing.T) {
		// Commits of 0, 1 and 150 steps and events (past any one
		// statement's row count) land whole and in order.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		sizes := []int{0, 1, 150, 2, 64, 65, 0}
		for turn, n := range sizes {
			res, err := b.s.TurnCommit(b.ctx, sized(r.ID, turn+1, n))
			require.NoError(t, err)
			require.Len(t, res.Events, n)
		}
		requireSized(t, b, r.ID, sizes)
		require.Equal(t, int64(150+1+2+64+65), b.get(t, r.ID).EventSeq)
	})
	t.Run("SizesMany", func(t *testing.T) {
		// A batch of commits of mixed sizes, with losers among them:
		// every winner's steps and events land, no loser's do.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var runs []string
		for range 12 {
			runs = append(runs, b.started(t, ten.ID).ID)
		}
		sizes := map[string][]int{}
		var ps []store.TurnCommitParams
		var lose []bool
		for k, id := range runs {
			n := []int{0, 1, 150, 7, 33}[k%5]
			ps = append(ps, sized(id, 1, n))
			lose = append(lose, false)
			sizes[id] = append(sizes[id], n)
			if k%3 == 0 {
				ps = append(ps, sized(id, 3, 5)) // skips a turn: loses
				lose = append(lose, true)
			}
			if k%4 == 0 {
				ps = append(ps, sized(id, 2, 70))
				lose = append(lose, false)
				sizes[id] = append(sizes[id], 70)
			}
		}
		results, errs, err := b.s.TurnCommitMany(b.ctx, ps)
		require.NoError(t, err)
		for i, p := range ps {
			if lose[i] {
				require.ErrorIs(t, errs[i], store.ErrConflict, "commit %d", i)
				continue
			}
			require.NoError(t, errs[i], "commit %d", i)
			require.Len(t, results[i].Events, len(p.Events))
		}
		for _, id := range runs {
			requireSized(t, b, id, sizes[id])
		}
	})
	t.Run("SizesCreateAppend", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var evs []agentfleet.Event
		for i := range 150 {
			evs = append(evs, agentfleet.Event{Type: agentfleet.EventQueued, Content: fmt.Sprint(i)})
		}
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Events: evs})
		got, err := b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: r.ID, Events: evs})
		require.NoError(t, err)
		requireSeqs(t, got, 151)
		all := b.events(t, r.ID)
		require.Len(t, all, 300)
		requireSeqs(t, all, 1)
		for i, e := range all {
			require.Equal(t, fmt.Sprint(i%150), e.Content)
		}
	})
}

func testTurnCommitMany(t *testing.T, newStore NewStore) {
	t.Run("WinnersAndLosers", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r1, r2, r3, r4 := b.started(t, ten.ID), b.started(t, ten.ID), b.started(t, ten.ID), b.started(t, ten.ID)
		b.transition(t, r4.ID, agentfleet.StatusFailed)
		before2, before4 := b.get(t, r2.ID), b.get(t, r4.ID)

		done := commitParams(r3.ID, 1, agentfleet.StatusCompleted, "r3")
		done.Answer = json.RawMessage(`42`)
		ps := []store.TurnCommitParams{
			commitParams(r1.ID, 1, agentfleet.StatusRunning, "r1t1"),
			commitParams(r2.ID, 2, agentfleet.StatusRunning, "r2 skips a turn"),
			done,
			commitParams("nope", 1, agentfleet.StatusRunning, "ghost"),
			{RunID: r2.ID, Turn: 1, Status: "sleeping"},
			commitParams(r1.ID, 2, agentfleet.StatusRunning, "r1t2"), // same run again: after its turn 1
			commitParams(r4.ID, 1, agentfleet.StatusRunning, "r4 ended"),
			commitParams(r1.ID, 2, agentfleet.StatusRunning, "r1t2 again"),
		}
		results, errs, err := b.s.TurnCommitMany(b.ctx, ps)
		require.NoError(t, err)
		require.Len(t, results, len(ps))
		require.Len(t, errs, len(ps))
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], store.ErrConflict)
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], store.ErrNotFound)
		require.ErrorIs(t, errs[4], store.ErrInvalid)
		require.NoError(t, errs[5])
		require.ErrorIs(t, errs[6], store.ErrConflict)
		require.ErrorIs(t, errs[7], store.ErrConflict)

		require.Equal(t, 1, results[0].Run.Turn)
		requireSeqs(t, results[0].Events, 1)
		require.Equal(t, 2, results[5].Run.Turn)
		requireSeqs(t, results[5].Events, 3)
		require.Equal(t, agentfleet.StatusCompleted, results[2].Run.Status)
		require.Equal(t, json.RawMessage(`42`), results[2].Run.Answer)

		got1 := b.get(t, r1.ID)
		require.Equal(t, results[5].Run, got1)
		require.Equal(t, agentfleet.Usage{PromptTokens: 20, CompletionTokens: 10}, got1.Usage)
		require.Len(t, b.steps(t, r1.ID), 5)
		evs := b.events(t, r1.ID)
		require.Len(t, evs, 4)
		requireSeqs(t, evs, 1)
		require.Equal(t, "r1t2", evs[2].Content)

		require.Equal(t, before2, b.get(t, r2.ID))
		require.Len(t, b.steps(t, r2.ID), 1)
		require.Empty(t, b.events(t, r2.ID))
		require.Equal(t, before4, b.get(t, r4.ID))
		for i, p := range ps {
			if errs[i] != nil {
				require.Zero(t, results[i], "commit %d lost: no result", i)
				require.ErrorContains(t, errs[i], p.RunID)
			}
		}
	})
	t.Run("SessionNext", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var heads, nexts []string
		var ps []store.TurnCommitParams
		for i := range 4 {
			session := fmt.Sprint("s", i)
			h := b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: session})
			n := b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: session})
			b.transition(t, h.ID, agentfleet.StatusRunning)
			heads, nexts = append(heads, h.ID), append(nexts, n.ID)
			status := agentfleet.StatusCompleted
			if i == 3 {
				status = agentfleet.StatusRunning // does not end: hands out nothing
			}
			ps = append(ps, commitParams(h.ID, 1, status, "x"))
		}
		results, errs, err := b.s.TurnCommitMany(b.ctx, ps)
		require.NoError(t, err)
		for i := range 4 {
			require.NoError(t, errs[i])
			if i == 3 {
				require.Nil(t, results[i].SessionNext)
				continue
			}
			require.NotNil(t, results[i].SessionNext, "session %d", i)
			require.Equal(t, nexts[i], results[i].SessionNext.ID)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		b := setup(t, newStore)
		results, errs, err := b.s.TurnCommitMany(b.ctx, nil)
		require.NoError(t, err)
		require.Empty(t, results)
		require.Empty(t, errs)
	})
	t.Run("Concurrent", func(t *testing.T) {
		// Batches that overlap on runs, committed at once, neither
		// deadlock nor let a turn land twice.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var runs []string
		for range 6 {
			runs = append(runs, b.started(t, ten.ID).ID)
		}
		const workers = 4
		wins := make([][]int, workers) // per worker: turns won per run
		concurrently(t, workers, func(w int) error {
			wins[w] = make([]int, len(runs))
			for turn := 1; turn <= 5; turn++ {
				var ps []store.TurnCommitParams
				for k := range runs {
					// Each worker walks the runs in another order.
					id := runs[(k+w)%len(runs)]
					ps = append(ps, commitParams(id, turn, agentfleet.StatusRunning, fmt.Sprint(w)))
				}
				results, errs, err := b.s.TurnCommitMany(b.ctx, ps)
				if err != nil {
					return err
				}
				for i, e := range errs {
					if e == nil {
						wins[w][(i+w)%len(runs)]++
						_ = results[i]
					}
				}
			}
			return nil
		})
		for k, id := range runs {
			total := 0
			for w := range workers {
				total += wins[w][k]
			}
			got := b.get(t, id)
			require.Equal(t, total, got.Turn, "run %d: every won turn counted once", k)
			require.Equal(t, int64(2*got.Turn), got.EventSeq)
			evs := b.events(t, id)
			requireSeqs(t, evs, 1)
			require.Len(t, b.steps(t, id), 1+2*got.Turn)
		}
	})
}
