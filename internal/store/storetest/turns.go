package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
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
			results := make([]store.RunChangeResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i], errs[i] = b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, fmt.Sprint("w", i)))
				}()
			}
			close(start)
			wg.Wait()
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
		var wg sync.WaitGroup
		wins := make([][]int, workers) // per worker: turns won per run
		errc := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
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
						errc <- err
						return
					}
					for i, e := range errs {
						if e == nil {
							wins[w][(i+w)%len(runs)]++
							_ = results[i]
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			require.NoError(t, err)
		}
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
