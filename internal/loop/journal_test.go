package loop_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// memJournal is an in-memory loop.Journal that charges an entry's ai()
// call to its reservation, as the store does in the same transaction.
type memJournal struct {
	mu      sync.Mutex
	entries map[int]agentfleet.JournalEntry
	meter   *memMeter
}

func (j *memJournal) JournalList(_ context.Context, _ string, turn int) ([]agentfleet.JournalEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []agentfleet.JournalEntry
	for _, e := range j.entries {
		if e.Turn == turn {
			out = append(out, e)
		}
	}
	return out, nil
}

func (j *memJournal) JournalRecord(ctx context.Context, e agentfleet.JournalEntry, charge *agentfleet.Reservation, model string) (bool, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.entries[e.Index]; ok {
		return true, false, nil
	}
	j.entries[e.Index] = e
	if charge == nil {
		return false, false, nil
	}
	return false, true, j.meter.Settle(ctx, *charge, e.Usage, model)
}

func journaled(t *testing.T, replies ...llm.Reply) (*bundle, *memJournal) {
	t.Helper()
	b := &bundle{model: llm.NewScripted(replies...), meter: &memMeter{}}
	b.rec = &memRecorder{meter: b.meter}
	j := &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: b.meter}
	var err error
	b.engine, err = loop.New(loop.Config{Model: b.model, Sandbox: pool(t), Meter: b.meter, Recorder: b.rec, Journal: j})
	require.NoError(t, err)
	t.Cleanup(func() { b.model.AssertDone(t) })
	return b, j
}

// A turn executed again (its first attempt died before the commit)
// replays its ai() and spawn() calls: the model is not called again, the
// budget is not charged again, the children are not spawned again, and
// the turn's result is the first attempt's.
func TestStepReplaysTheJournal(t *testing.T) {
	t.Parallel()
	b, j := journaled(t,
		llm.Reply{Content: js(`function run() {
			const a = ai("first"), b = aiJSON("second");
			const c = spawn({message: "child task"});
			return {a, b, c};
		}`), Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}},
		llm.Reply{Content: "one", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 1}},
		llm.Reply{Content: `{"two":2}`, Usage: agentfleet.Usage{PromptTokens: 12, CompletionTokens: 3}},
	)
	var spawns spawnRecorder
	run := agentfleet.Run{ID: "r1", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "go"}
	first, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Spawn: spawns.spawn, FirstAttempt: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"a":"one","b":{"two":2},"c":"child-2"}`, string(first.Args), "spawn's index is its journal index")
	require.Len(t, j.entries, 3)
	used := b.meter.used
	require.Equal(t, int64(120+11+15), used)
	require.Zero(t, b.meter.reserved)

	again, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Spawn: spawns.spawn})
	require.NoError(t, err)
	require.JSONEq(t, string(first.Args), string(again.Args))
	require.Equal(t, first.Usage, again.Usage, "the run's usage counts the replayed calls")
	require.Equal(t, used, b.meter.used, "nothing is charged twice")
	require.Zero(t, b.meter.reserved)
	require.Len(t, spawns.calls, 1, "the child is not spawned again")
	require.Equal(t, 1, again.Spawned)
	var replayed, spawned int
	for _, ev := range again.Events {
		switch {
		case ev.Type == agentfleet.EventModelCall && ev.Tokens != nil && ev.Summary != "" && ev.Content == "":
			replayed++
		case ev.Type == agentfleet.EventChildSpawned:
			spawned++
		}
	}
	require.Equal(t, 2, replayed)
	require.Equal(t, 1, spawned)
}

// A script that calls something else on its second attempt fails with
// the journal's error instead of getting another call's result.
func TestStepJournalMismatch(t *testing.T) {
	t.Parallel()
	b, j := journaled(t, llm.Reply{Content: js(`function run() { return spawn({message: "x"}); }`)})
	j.entries[0] = agentfleet.JournalEntry{RunID: "r1", Turn: 1, Index: 0, Primitive: "ai", Result: json.RawMessage(`"old"`)}
	var spawns spawnRecorder
	run := agentfleet.Run{ID: "r1", Tenant: "acme", Status: agentfleet.StatusRunning, Message: "go"}
	res, err := b.engine.Step(context.Background(), loop.TurnInput{Run: run, Spawn: spawns.spawn})
	require.NoError(t, err)
	require.Empty(t, spawns.calls)
	require.Contains(t, res.Steps[1].Content, "not deterministic")
	require.Contains(t, res.Steps[1].Content, "was ai(), now it is spawn()")
}
