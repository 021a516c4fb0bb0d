package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// testJournal: JournalRecord records a call's outcome once per (run,
// turn, index), fenced like a reply; JournalListByRun lists in order.
func testJournal(t *testing.T, newStore NewStore) {
	post := func(runID string, turn, index int, body string) agentfleet.JournalEntry {
		return agentfleet.JournalEntry{RunID: runID, Turn: turn, Index: index, Primitive: "http", Method: "POST",
			URL: "https://api.example.com/orders", Result: json.RawMessage(`{"status":201,"body":"` + body + `"}`)}
	}
	record := func(b bundle, e agentfleet.JournalEntry) (store.JournalRecordResult, error) {
		return b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: e})
	}
	t.Run("RecordOnce", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		at := time.Date(2025, 5, 6, 7, 8, 9, 987654321, time.UTC)
		e := post(r.ID, 1, 0, "first")
		e.CreatedAt = at
		res, err := record(b, e)
		require.NoError(t, err)
		require.False(t, res.Existed)
		want := e
		want.CreatedAt = at.Truncate(time.Microsecond)
		require.Equal(t, want, res.Entry)

		// The turn executed again records its outcome again: the first
		// one stays and comes back.
		dup := post(r.ID, 1, 0, "second")
		res, err = record(b, dup)
		require.NoError(t, err)
		require.True(t, res.Existed)
		require.Equal(t, want, res.Entry)

		failed := agentfleet.JournalEntry{RunID: r.ID, Turn: 1, Index: 1, Primitive: "fetch", Method: "PUT", URL: "https://x.example/", Error: "fetch https://x.example/: timed out after 30s"}
		res, err = record(b, failed)
		require.NoError(t, err)
		require.Nil(t, res.Entry.Result, "an error outcome has no result")
		require.Equal(t, failed.Error, res.Entry.Error)
		ai := agentfleet.JournalEntry{RunID: r.ID, Turn: 1, Index: 2, Primitive: "ai", Result: json.RawMessage(`"an answer"`),
			Usage: agentfleet.Usage{PromptTokens: 30, CompletionTokens: 7}}
		_, err = record(b, ai)
		require.NoError(t, err)
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		spawn := agentfleet.JournalEntry{RunID: r.ID, Turn: 2, Index: 0, Primitive: "spawn", Result: json.RawMessage(`"child-1"`)}
		_, err = record(b, spawn)
		require.NoError(t, err)

		all, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{RunID: r.ID})
		require.NoError(t, err)
		require.Len(t, all, 4)
		for i, want := range []struct {
			turn, index int
			prim        string
		}{{1, 0, "http"}, {1, 1, "fetch"}, {1, 2, "ai"}, {2, 0, "spawn"}} {
			require.Equal(t, want.turn, all[i].Turn, "entry %d", i)
			require.Equal(t, want.index, all[i].Index, "entry %d", i)
			require.Equal(t, want.prim, all[i].Primitive, "entry %d", i)
			require.Equal(t, time.UTC, all[i].CreatedAt.Location())
		}
		require.Equal(t, ai.Usage, all[2].Usage)
		require.JSONEq(t, `"an answer"`, string(all[2].Result))
		one, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{RunID: r.ID, Turn: 2})
		require.NoError(t, err)
		require.Len(t, one, 1)
		require.Equal(t, "spawn", one[0].Primitive)
		none, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{RunID: "nope"})
		require.NoError(t, err)
		require.Empty(t, none)
	})
	t.Run("Fence", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		rec := func(turn int) error {
			_, err := record(b, post(r.ID, turn, 0, "x"))
			return err
		}
		require.ErrorIs(t, rec(2), store.ErrConflict, "turn 1 is not committed")
		_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		require.ErrorIs(t, rec(1), store.ErrConflict, "turn 1 is committed")
		require.NoError(t, rec(2))
		b.transition(t, r.ID, agentfleet.StatusFailed)
		require.ErrorIs(t, rec(2), store.ErrConflict, "the run ended")
		_, err = record(b, post("nope", 1, 0, "x"))
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Invalid", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		for name, e := range map[string]agentfleet.JournalEntry{
			"no run":         {Turn: 1, Primitive: "ai"},
			"turn 0":         {RunID: r.ID, Primitive: "ai"},
			"negative index": {RunID: r.ID, Turn: 1, Index: -1, Primitive: "ai"},
			"not journaled":  {RunID: r.ID, Turn: 1, Primitive: "wait"},
			"bad result":     {RunID: r.ID, Turn: 1, Primitive: "ai", Result: json.RawMessage(`{`)},
			"negative usage": {RunID: r.ID, Turn: 1, Primitive: "ai", Usage: agentfleet.Usage{PromptTokens: -1}},
		} {
			_, err := record(b, e)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{})
		require.ErrorIs(t, err, store.ErrInvalid)
		all, err := b.s.JournalListByRun(b.ctx, store.JournalListByRunParams{RunID: r.ID})
		require.NoError(t, err)
		require.Empty(t, all, "nothing was written")
	})
	t.Run("Text", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		e := agentfleet.JournalEntry{RunID: r.ID, Turn: 1, Primitive: "http", Method: "POST", URL: "https://x.example/\x00",
			Result: json.RawMessage(`{"body":"a\u0000b"}`), Error: ""}
		res, err := record(b, e)
		require.NoError(t, err)
		require.Equal(t, "https://x.example/\uFFFD", res.Entry.URL)
		require.JSONEq(t, `{"body":"a\ufffdb"}`, string(res.Entry.Result))
	})
	t.Run("Charge", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.started(t, ten.ID)
		ai := agentfleet.JournalEntry{RunID: r.ID, Turn: 1, Primitive: "ai", Result: json.RawMessage(`"yes"`),
			Usage: agentfleet.Usage{PromptTokens: 120, CompletionTokens: 30}}
		held := b.reserve(t, ten.ID, 500, day)
		charge := settleParams(held, 120, 30, day)
		res, err := b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: ai, Charge: &charge})
		require.NoError(t, err)
		require.False(t, res.Existed)
		require.NoError(t, res.ChargeErr)
		require.Equal(t, store.BudgetSettleResult{Charged: 150}, res.Settled)
		st := b.budget(t, ten.ID, day)
		require.Equal(t, int64(150), st.Used)
		require.Zero(t, st.Reserved)

		// Recorded already: nothing is charged, the reservation is left
		// for the caller.
		again := b.reserve(t, ten.ID, 200, day)
		charge = settleParams(again, 120, 30, day)
		res, err = b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: ai, Charge: &charge})
		require.NoError(t, err)
		require.True(t, res.Existed)
		require.Zero(t, res.Settled)
		st = b.budget(t, ten.ID, day)
		require.Equal(t, int64(150), st.Used)
		require.Equal(t, int64(200), st.Reserved)

		// Fenced off: nothing is charged either.
		charge = settleParams(again, 10, 10, day)
		next := ai
		next.Turn = 2
		_, err = b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: next, Charge: &charge})
		require.ErrorIs(t, err, store.ErrConflict)
		require.Equal(t, int64(150), b.budget(t, ten.ID, day).Used)
		b.settle(t, again, 1, 1, day)

		// A reservation gone: the entry is recorded, the charge reported.
		second := ai
		second.Index = 1
		res, err = b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: second, Charge: &charge})
		require.NoError(t, err)
		require.False(t, res.Existed)
		require.ErrorIs(t, res.ChargeErr, store.ErrNotFound)
	})
	t.Run("ChargeUnlimited", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		ai := agentfleet.JournalEntry{RunID: r.ID, Turn: 1, Primitive: "aiJSON", Result: json.RawMessage(`{"ok":true}`),
			Usage: agentfleet.Usage{PromptTokens: 40, CompletionTokens: 2}}
		charge := store.BudgetSettleParams{Tenant: ten.ID, RunID: r.ID, Model: "m1", Usage: ai.Usage, Now: day}
		for range 2 {
			_, err := b.s.JournalRecord(b.ctx, store.JournalRecordParams{JournalEntry: ai, Charge: &charge})
			require.NoError(t, err)
		}
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: r.ID, Usage: ai.Usage, Calls: 1}}, rows, "charged once")
	})
}
