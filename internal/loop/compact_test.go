package loop_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/sandbox"
)

// summarizer is a scripted summarizer model: it keeps every request and
// answers call n with "<tag>S<n>(<k> items)", or fails the calls in fail.
type summarizer struct {
	mu   sync.Mutex
	tag  string
	reqs []agentfleet.ModelRequest
	fail map[int]error
}

func (s *summarizer) Complete(_ context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	if err := s.fail[n]; err != nil {
		return agentfleet.ModelResponse{}, err
	}
	content := fmt.Sprintf("%sS%d(%d items)", s.tag, n, len(itemLabels(req)))
	return agentfleet.ModelResponse{Content: content, Model: req.Model,
		Usage: agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(req.Messages), CompletionTokens: 7}}, nil
}

func (s *summarizer) requests() []agentfleet.ModelRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]agentfleet.ModelRequest(nil), s.reqs...)
}

var itemLabel = regexp.MustCompile(`<item-(\d+)>`)

// itemLabels are the items a summarizer call folds in (not those its
// summary so far mentions).
func itemLabels(req agentfleet.ModelRequest) []string {
	_, part, _ := strings.Cut(req.Messages[len(req.Messages)-1].Content, "Next part of the conversation, oldest first:\n\n")
	var out []string
	for _, m := range itemLabel.FindAllStringSubmatch(part, -1) {
		out = append(out, m[1])
	}
	return out
}

// history is n items of about size bytes each, labelled in order.
func history(n, size int) []loop.CompactItem {
	items := make([]loop.CompactItem, n)
	for i := range items {
		head := fmt.Sprintf("<item-%02d> user: step %d please\nassistant: [script elided]\nresult: ", i, i)
		tail := fmt.Sprintf(" </item-%02d>", i)
		text := head + strings.Repeat("x", max(size-len(head)-len(tail), 0)) + tail
		items[i] = loop.CompactItem{Text: text}
	}
	return items
}

// A small profile: fold past 3,000 tokens, keep 1,000, 200-token summaries.
var smallProfile = agentfleet.Profile{Budget: 10000, Trigger: 3000, Keep: 1000, SummaryTokens: 200}

func TestCompactUnderTheTrigger(t *testing.T) {
	t.Parallel()
	model := llm.NewScripted() // any call fails the test
	t.Cleanup(func() { model.AssertDone(t) })
	res, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, Profile: smallProfile, Previous: "earlier: the user is Ada", Items: history(9, 900), // 2,700 tokens and the summary
	})
	require.NoError(t, err)
	require.Equal(t, loop.CompactResult{Summary: "earlier: the user is Ada"}, res)

	// One item is never folded, however large.
	res, err = loop.Compact(context.Background(), loop.CompactRequest{Model: model, Profile: smallProfile, Items: history(1, 50000)})
	require.NoError(t, err)
	require.Zero(t, res.Covered)
}

// The oldest items are folded, oldest first and whole, in chunks that
// each fit the summarizer's window with its reply; each call carries the
// summary so far, the first the previous one.
func TestCompactChunksOldestFirst(t *testing.T) {
	t.Parallel()
	model := &summarizer{}
	items := history(20, 600) // 200 tokens each
	const window = 2048
	res, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, ModelName: "small", Window: window, Profile: smallProfile,
		Previous: "PREV: the user is Ada, order 4411", Items: items,
	})
	require.NoError(t, err)
	require.Equal(t, 15, res.Covered, "the 5 newest items (1,000 tokens) stay")
	reqs := model.requests()
	require.Greater(t, len(reqs), 2, "15 items of 200 tokens need several 2,048-token calls")
	require.Equal(t, len(reqs), res.Calls)
	require.Equal(t, fmt.Sprintf("S%d(", len(reqs)), res.Summary[:len(fmt.Sprintf("S%d(", len(reqs)))], "the last call's summary")

	var folded []string
	var usage agentfleet.Usage
	for i, req := range reqs {
		require.Equal(t, "small", req.Model)
		require.Equal(t, 200, req.MaxTokens)
		require.LessOrEqual(t, agentfleet.EstimateTokens(req.Messages)+int64(req.MaxTokens), int64(window-window/8), "call %d fits the window", i)
		system, user := req.Messages[0].Content, req.Messages[1].Content
		for _, want := range []string{"what the user asked", "answered", "decisions", "names", "numbers", "open questions"} {
			require.Contains(t, system, want)
		}
		if i == 0 {
			require.True(t, strings.HasPrefix(user, "Summary so far:\nPREV: the user is Ada, order 4411\n"), user[:80])
		} else {
			require.True(t, strings.HasPrefix(user, fmt.Sprintf("Summary so far:\nS%d(", i)), "call %d merges call %d's summary", i+1, i)
		}
		labels := itemLabels(req)
		require.NotEmpty(t, labels)
		for _, l := range labels {
			n, err := strconv.Atoi(l)
			require.NoError(t, err)
			require.Contains(t, user, items[n].Text, "item %d is whole", n)
		}
		folded = append(folded, labels...)
		usage = usage.Add(agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(req.Messages), CompletionTokens: 7})
	}
	var want []string
	for i := range 15 {
		want = append(want, fmt.Sprintf("%02d", i))
	}
	require.Equal(t, want, folded, "each folded item once, oldest first, none kept")
	require.Equal(t, usage, res.Usage)
	require.Equal(t, usage, res.Charge, "no meter: the caller charges it all")
}

// An item larger than any call is cut in its middle, alone in its call;
// the items around it are not touched.
func TestCompactCutsAnItemTooLargeForACall(t *testing.T) {
	t.Parallel()
	model := &summarizer{}
	items := history(4, 600)
	items[1].Text = "<item-01> HEAD-OF-IT " + strings.Repeat("y", 20000) + " END-OF-IT"
	items = append(items, history(6, 600)[5]) // a newest item, kept
	const window = 2048
	res, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, Window: window, Profile: agentfleet.Profile{Budget: 10000, Trigger: 3000, Keep: 300, SummaryTokens: 200}, Items: items,
	})
	require.NoError(t, err)
	require.Equal(t, 4, res.Covered)
	reqs := model.requests()
	require.Len(t, reqs, 3, "item 0, then item 1 alone, then items 2 and 3")
	require.Equal(t, []string{"00"}, itemLabels(reqs[0]))
	require.Equal(t, []string{"01"}, itemLabels(reqs[1]))
	require.Equal(t, []string{"02", "03"}, itemLabels(reqs[2]))
	cut := reqs[1].Messages[1].Content
	require.Contains(t, cut, "HEAD-OF-IT")
	require.Contains(t, cut, "END-OF-IT")
	require.Contains(t, cut, "cut here to fit the summarizer")
	for _, req := range reqs {
		require.LessOrEqual(t, agentfleet.EstimateTokens(req.Messages)+int64(req.MaxTokens), int64(window-window/8))
	}
}

// A window too small for any history past the summary and its reply is
// an error, not a call.
func TestCompactWindowTooSmall(t *testing.T) {
	t.Parallel()
	model := llm.NewScripted()
	t.Cleanup(func() { model.AssertDone(t) })
	_, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, Window: 1024, Profile: agentfleet.Profile{Budget: 10000, Trigger: 100, Keep: 10, SummaryTokens: 600}, Items: history(3, 600),
	})
	require.ErrorContains(t, err, "summarizer's window (1024 tokens)")
}

// A failing call fails the compaction: no summary, nothing covered, the
// spent calls charged once, no reservation left held.
func TestCompactFailingCall(t *testing.T) {
	t.Parallel()
	unavailable := &agentfleet.ModelUnavailableError{Model: "tiny", Reason: "no route"}
	model := &summarizer{fail: map[int]error{2: unavailable}}
	meter := &memMeter{}
	res, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, ModelName: "tiny", Window: 2048, Profile: smallProfile, Items: history(20, 600),
		Meter: meter, Tenant: "acme", RunID: "r1",
	})
	var mu *agentfleet.ModelUnavailableError
	require.ErrorAs(t, err, &mu, "the caller tells a model it cannot have from a passing failure")
	require.Empty(t, res.Summary)
	require.Zero(t, res.Covered)
	require.Equal(t, 1, res.Calls)
	first := agentfleet.EstimateTokens(model.requests()[0].Messages) + 7
	require.Equal(t, first, res.Usage.Total())
	require.Zero(t, res.Charge.Total(), "the meter charged it")
	require.Equal(t, first, meter.used)
	require.Zero(t, meter.reserved)
}

// A tenant out of budget gets no summary call.
func TestCompactOutOfBudget(t *testing.T) {
	t.Parallel()
	model := llm.NewScripted()
	t.Cleanup(func() { model.AssertDone(t) })
	_, err := loop.Compact(context.Background(), loop.CompactRequest{
		Model: model, Window: 2048, Profile: smallProfile, Items: history(20, 600),
		Meter: &memMeter{limit: 100}, Tenant: "acme", RunID: "r1",
	})
	var be *agentfleet.BudgetExhaustedError
	require.ErrorAs(t, err, &be)
}

func journaledCompaction(model loop.Model, j loop.Journal, meter *memMeter, items []loop.CompactItem) loop.CompactRequest {
	return loop.CompactRequest{
		Model: model, ModelName: "small", Window: 2048, Profile: smallProfile, Previous: "PREV", Items: items,
		Meter: meter, Tenant: "acme", RunID: "r1", Journal: j, Turn: 3,
	}
}

// A crash between the summary calls and the checkpoint (the turn never
// committed) does not summarize again or bill again: the turn compacting
// again replays the journal, and the run's usage still counts the calls.
func TestCompactReplaysTheJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	meter := &memMeter{}
	j := &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}
	items := history(20, 600)
	model := &summarizer{}
	first, err := loop.Compact(ctx, journaledCompaction(model, j, meter, items))
	require.NoError(t, err)
	require.Greater(t, first.Calls, 2)
	require.Len(t, j.entries, first.Calls)
	for i := range first.Calls {
		e := j.entries[loop.SummaryJournalIndex+i]
		require.Equal(t, 3, e.Turn)
		require.Equal(t, "ai", e.Primitive)
		require.Positive(t, e.Usage.Total())
	}
	require.Equal(t, first.Usage.Total(), meter.used, "each call charged with its entry")
	require.Zero(t, meter.reserved)
	require.Zero(t, first.Charge.Total())

	again, err := loop.Compact(ctx, journaledCompaction(llm.NewScripted(), j, meter, items))
	require.NoError(t, err, "no model call")
	require.Equal(t, first.Summary, again.Summary)
	require.Equal(t, first.Covered, again.Covered)
	require.Equal(t, first.Usage, again.Usage, "the run's usage counts the replayed calls")
	require.Zero(t, again.Calls)
	require.Equal(t, first.Calls, again.Replayed)
	require.Equal(t, first.Usage.Total(), meter.used, "nothing is charged twice")
}

// A crash in the middle of a compaction: the calls journaled are
// replayed, the rest made, each charged once.
func TestCompactResumesFromTheJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	meter := &memMeter{}
	j := &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}
	items := history(20, 600)
	broken := &summarizer{tag: "A", fail: map[int]error{3: errors.New("connection reset")}}
	_, err := loop.Compact(ctx, journaledCompaction(broken, j, meter, items))
	require.ErrorContains(t, err, "connection reset")
	require.Len(t, j.entries, 2)
	spent := meter.used

	model := &summarizer{tag: "B"}
	res, err := loop.Compact(ctx, journaledCompaction(model, j, meter, items))
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	reqs := model.requests()
	require.Len(t, reqs, res.Calls)
	require.True(t, strings.HasPrefix(reqs[0].Messages[1].Content, "Summary so far:\nAS2("), "it goes on from the journaled summary")
	var now int64
	for _, req := range reqs {
		now += agentfleet.EstimateTokens(req.Messages) + 7
	}
	require.Equal(t, spent+now, meter.used)
	require.Zero(t, meter.reserved)
	require.True(t, strings.HasPrefix(res.Summary, "BS"))
}

// lateJournal hides its entries from the first listing, as a journal
// read before another attempt of the turn recorded its calls.
type lateJournal struct {
	*memJournal
	listed bool
}

func (j *lateJournal) JournalList(ctx context.Context, runID string, turn int) ([]agentfleet.JournalEntry, error) {
	if !j.listed {
		j.listed = true
		return nil, nil
	}
	return j.memJournal.JournalList(ctx, runID, turn)
}

// Two attempts of a turn compacting at once: the summary recorded first
// is the one both go on from; the other's call is charged apart, as its
// tokens were spent.
func TestCompactTakesTheRecordedSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	meter := &memMeter{}
	j := &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}
	items := history(20, 600)
	first, err := loop.Compact(ctx, journaledCompaction(&summarizer{tag: "A"}, j, meter, items))
	require.NoError(t, err)
	spent := meter.used

	model := &summarizer{tag: "B"}
	second, err := loop.Compact(ctx, journaledCompaction(model, &lateJournal{memJournal: j}, meter, items))
	require.NoError(t, err)
	require.Equal(t, first.Summary, second.Summary)
	require.Len(t, model.requests(), 1, "the later calls replay the first attempt's")
	require.Equal(t, first.Calls-1, second.Replayed)
	require.Equal(t, spent+agentfleet.EstimateTokens(model.requests()[0].Messages)+7, meter.used)
	require.Zero(t, meter.reserved)
}

// A journal entry of another history (the items changed between the
// attempts) is not taken for this compaction's.
func TestCompactJournalMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	meter := &memMeter{}
	j := &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}
	_, err := loop.Compact(ctx, journaledCompaction(&summarizer{}, j, meter, history(20, 600)))
	require.NoError(t, err)
	model := llm.NewScripted()
	t.Cleanup(func() { model.AssertDone(t) })
	_, err = loop.Compact(ctx, journaledCompaction(model, j, meter, history(21, 600)[1:]))
	var mismatch *agentfleet.JournalMismatchError
	require.ErrorAs(t, err, &mismatch)
}

// One header, written by the compactor and read by the prompt: the last
// turn of the step's run it covers; a step without it covers the turns
// before its own.
func TestSummaryContent(t *testing.T) {
	t.Parallel()
	for _, through := range []int{0, 4} {
		content := loop.RenderSummary(through, "Ada asked for order 4411.\nIt shipped.")
		got, text := loop.ParseSummary(agentfleet.Step{Turn: 9, Kind: agentfleet.StepSummary, Content: content})
		require.Equal(t, through, got)
		require.Equal(t, "Ada asked for order 4411.\nIt shipped.", text)
	}
	require.Equal(t, "[summary of the session through turn 4]\nS", loop.RenderSummary(4, "S"))
	for _, bare := range []string{"", "S", "[summary of the session through turn x]\nS", "summary through run r1 turn 2\nS",
		"[summary of the session through turn 2] more\nS", "a [summary of the session through turn 2]\nS"} {
		got, text := loop.ParseSummary(agentfleet.Step{Turn: 3, Kind: agentfleet.StepSummary, Content: bare})
		require.Equal(t, 2, got, "%q covers the turns before its own", bare)
		require.Equal(t, bare, text)
	}
}

// The default profile is the engine's defaults: an agent without a
// context_window prompts as it did.
func TestDefaultProfileIsTheEngineDefaults(t *testing.T) {
	t.Parallel()
	p := agentfleet.ProfileFor(0)
	require.Equal(t, loop.ContextTokensDefault, p.Budget)
	require.Equal(t, loop.MaxCompletionTokensDefault, p.Reserve)
	require.Equal(t, sandbox.LogBytesDefault, p.LogCap)
}

// staleJournal refuses every record, as the store does once the turn was
// committed by another attempt.
type staleJournal struct{ *memJournal }

func (staleJournal) JournalRecord(context.Context, agentfleet.JournalEntry, *agentfleet.Reservation, string) (bool, bool, error) {
	return false, false, loop.ErrStale
}

// A compaction of a turn committed elsewhere says so (the caller stops
// the turn); the call it made is charged apart, its tokens were spent.
func TestCompactStaleTurn(t *testing.T) {
	t.Parallel()
	meter := &memMeter{}
	model := &summarizer{}
	j := staleJournal{&memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}}
	res, err := loop.Compact(context.Background(), journaledCompaction(model, j, meter, history(20, 600)))
	require.ErrorIs(t, err, loop.ErrStale)
	require.Zero(t, res.Covered)
	require.Len(t, model.requests(), 1)
	require.Equal(t, agentfleet.EstimateTokens(model.requests()[0].Messages)+7, meter.used)
	require.Equal(t, meter.used, res.Usage.Total())
	require.Zero(t, meter.reserved)
}

// An unlimited tenant's summary calls hold nothing and are still charged.
func TestCompactUnlimitedTenant(t *testing.T) {
	t.Parallel()
	meter := &memMeter{}
	req := journaledCompaction(&summarizer{}, &memJournal{entries: map[int]agentfleet.JournalEntry{}, meter: meter}, meter, history(20, 600))
	req.Unlimited = true
	res, err := loop.Compact(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, res.Calls, meter.unheld)
	require.Empty(t, meter.reserves)
	require.Equal(t, res.Usage.Total(), meter.used)
}

// The first Whole items fold together or not at all, even the last; the
// previous summary counts what the caller says it costs.
func TestCompactWholeAndPreviousTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		items, whole   int
		previousTokens int64
		covered        int
	}{
		{"fewer than whole would fold", 20, 18, 0, 18},
		{"more than whole fold anyway", 20, 3, 0, 15},
		{"all of them when all are whole", 20, 20, 0, 20},
		{"under the trigger none", 9, 9, 0, 0},
		{"a costly previous summary tips it over", 9, 9, 2000, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := loop.Compact(context.Background(), loop.CompactRequest{
				Model: &summarizer{}, Window: 4096, Profile: smallProfile, Items: history(tc.items, 600), Whole: tc.whole,
				Previous: "PREV", PreviousTokens: tc.previousTokens,
			})
			require.NoError(t, err)
			require.Equal(t, tc.covered, res.Covered)
		})
	}
}
