// The summarizing compactor (DESIGN §17): when a history outgrows its
// profile's trigger, its oldest items are folded into a summary by a
// summarizer model, chunk by chunk so that each call fits the
// summarizer's window, and the summary is stored as a checkpoint step
// (agentfleet.StepSummary) that later turns and runs replay instead.

package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
)

// CompactItem is one indivisible unit of history: a turn (its script and
// its result together) or an earlier run's record. It is folded whole or
// not at all.
type CompactItem struct {
	Text string
	// Tokens is what the item costs in the prompt (EstimateTokens of
	// its messages); 0: estimated from Text.
	Tokens int64
}

// CompactRequest is a history to compact, oldest item first.
type CompactRequest struct {
	// Model is the summarizer; ModelName the model asked for (the
	// agent's summary_model, else its model).
	Model     Model
	ModelName string
	// Window is the summarizer's context window: every call's prompt
	// and reply fit it (0: Profile.SummaryWindow()).
	Window int
	// Profile is the agent's, fitted to its system prompt
	// (Profile.Fit): when to fold, what to keep, the summary's cap.
	Profile agentfleet.Profile
	// Previous is the summary of what came before Items, if any;
	// PreviousTokens what it costs in the prompt (0: estimated from it).
	Previous       string
	PreviousTokens int64
	Items          []CompactItem
	// Whole is how many of the oldest items fold together or not at
	// all, even the last: a session's earlier runs and the run's task,
	// which one summary step covers whole.
	Whole int

	// Meter, when set, charges each call to Tenant and RunID: reserved
	// before it (ReserveUnlimited when Unlimited) and settled after,
	// with its journal entry when journaled. Nil: the caller charges
	// CompactResult.Charge.
	Meter     Meter
	Tenant    string
	RunID     string
	Unlimited bool
	// Journal, when set, records each call's summary under turn Turn of
	// RunID (indexes from SummaryJournalIndex), its charge in the same
	// write. The turn compacting again after a crash before its
	// checkpoint replays those entries: no call, no charge, same summary.
	Journal Journal
	Turn    int
}

// CompactResult is what a compaction folded.
type CompactResult struct {
	// Summary covers Previous and the first Covered items (Previous
	// itself when Covered is 0).
	Summary string
	Covered int
	// Usage is every call's, the replayed ones included (a crashed
	// attempt's turn never committed it): the run's usage counts it.
	Usage agentfleet.Usage
	// Charge is the usage of the calls made now and charged by no
	// Meter: what the caller still charges the tenant.
	Charge agentfleet.Usage
	// Calls counts the model calls made now, Replayed those taken from
	// the journal.
	Calls, Replayed int
}

// SummaryJournalIndex is the journal index of a compaction's first call:
// far past any script's calls of the turn (a turn's model calls are
// capped in the tens), so neither replays the other's.
const SummaryJournalIndex = 1 << 20

// summaryRoomMin is the least room for history a summarizer call must
// leave; below it the window cannot hold a useful chunk.
const summaryRoomMin = 256

const chunkSeparator = "\n\n---\n\n"

// summarizerPrompt is the summarizer's system prompt. What the summary
// drops the agent never sees again, so it lists what must survive.
const summarizerPrompt = "You keep the running summary of an agent's conversation. It replaces the part it covers in the agent's later prompts: what it leaves out is forgotten.\n" +
	"Merge the summary so far (if any) and the next part of the conversation into one updated summary, in order. Keep:\n" +
	"- what the user asked, and what was answered or returned;\n" +
	"- facts learned, decisions made and why;\n" +
	"- names, identifiers, numbers, dates, URLs and values, exactly;\n" +
	"- errors met and how they were resolved;\n" +
	"- open questions and unfinished work.\n" +
	"Drop greetings, superseded code and repetition. Reply with the summary only, plain text, under about %d words."

// Compact folds the oldest items of a history into a summary when the
// history (Previous and Items) exceeds the profile's trigger, so that
// about Keep tokens of the newest items stay verbatim (the last item
// always does, unless it is one of the Whole). Under the trigger it
// returns Previous and calls nothing.
//
// The folded items go to the summarizer oldest first, in chunks that
// each fit one call with the summary so far; an item larger than a chunk
// is cut in its middle for the call, never split across two. A call that
// fails fails the compaction: the error, no summary, Covered 0, and the
// usage (and Charge) of the calls already made, which were spent. Item
// texts reach the summarizer as given: the caller redacts them.
func Compact(ctx context.Context, req CompactRequest) (CompactResult, error) {
	if req.Model == nil {
		return CompactResult{}, errors.New("compact: CompactRequest.Model is nil")
	}
	p := req.Profile
	if p.Budget == 0 {
		p = agentfleet.ProfileFor(0)
	}
	res := CompactResult{Summary: req.Previous}
	covered := foldPoint(req.Items, previousTokens(req), p)
	if covered > 0 && covered < req.Whole {
		covered = min(req.Whole, len(req.Items))
	}
	if covered == 0 {
		return res, nil
	}
	window := req.Window
	if window <= 0 {
		window = p.SummaryWindow()
	}
	maxTokens := max(p.SummaryTokens, 1)
	system := fmt.Sprintf(summarizerPrompt, maxTokens*3/4)

	var recorded map[int]agentfleet.JournalEntry
	if req.Journal != nil {
		var err error
		if recorded, err = journalEntries(ctx, req); err != nil {
			return failed(res), err
		}
	}
	summary := req.Previous
	for i, call := 0, 0; i < covered; call++ {
		msgs, n, err := summaryChunk(system, summary, req.Items[i:covered], window, maxTokens)
		if err != nil {
			return failed(res), err
		}
		i += n
		index := SummaryJournalIndex + call
		fp := fingerprint(req.ModelName, msgs)
		if rec, ok := recorded[index]; ok {
			if summary, err = replaySummary(rec, fp); err != nil {
				return failed(res), err
			}
			res.Usage = res.Usage.Add(rec.Usage)
			res.Replayed++
			continue
		}
		mreq := agentfleet.ModelRequest{Model: req.ModelName, Messages: msgs, MaxTokens: maxTokens}
		next, err := summaryCall(ctx, req, mreq, index, fp, &res, &recorded)
		if err != nil {
			return failed(res), fmt.Errorf("compact: summary call %d of turn %d: %w", call+1, req.Turn, err)
		}
		summary = next
	}
	res.Summary, res.Covered = summary, covered
	return res, nil
}

// failed is res after a failure: no summary, nothing covered, the usage
// already spent.
func failed(res CompactResult) CompactResult {
	res.Summary, res.Covered = "", 0
	return res
}

// foldPoint counts the oldest items to fold: none while the history fits
// the trigger, else enough that at most Keep tokens of items stay, never
// the last one.
func foldPoint(items []CompactItem, previous int64, p agentfleet.Profile) int {
	if len(items) < 2 {
		return 0
	}
	costs := make([]int64, len(items))
	var total int64
	for i, it := range items {
		costs[i] = it.Tokens
		if costs[i] <= 0 {
			costs[i] = agentfleet.EstimateTextTokens(it.Text)
		}
		total += costs[i]
	}
	if total+previous <= int64(p.Trigger) {
		return 0
	}
	k := 0
	for k < len(items)-1 && total > int64(p.Keep) {
		total -= costs[k]
		k++
	}
	return k
}

func previousTokens(req CompactRequest) int64 {
	switch {
	case req.PreviousTokens > 0:
		return req.PreviousTokens
	case req.Previous != "":
		return agentfleet.EstimateTextTokens(req.Previous)
	}
	return 0
}

// summaryChunk composes the next summarizer call: the summary so far and
// as many of items as fit the window with the reply (n of them, at least
// one; a first item too large for any call is cut in its middle).
func summaryChunk(system, summary string, items []CompactItem, window, maxTokens int) ([]agentfleet.ChatMessage, int, error) {
	head := "Next part of the conversation, oldest first:\n\n"
	if summary != "" {
		head = "Summary so far:\n" + summary + "\n\n" + head
	}
	// The estimate of a message is 4 + (bytes+2)/3 tokens; the window
	// keeps an eighth against estimates that undercount dense text.
	fit := int64(window - window/8 - maxTokens)
	room := fit - agentfleet.EstimateTokens([]agentfleet.ChatMessage{{Content: system}}) - 4
	bodyBytes := int(room*3) - 2 - len(head)
	if bodyBytes < summaryRoomMin*3 {
		return nil, 0, fmt.Errorf("compact: the summarizer's window (%d tokens) leaves %d bytes for history past the summary so far (%d bytes) and a %d-token reply",
			window, max(bodyBytes, 0), len(summary), maxTokens)
	}
	var body strings.Builder
	body.WriteString(head)
	n := 0
	for _, it := range items {
		add := len(it.Text)
		if n > 0 {
			add += len(chunkSeparator)
		}
		if body.Len()-len(head)+add > bodyBytes {
			break
		}
		if n > 0 {
			body.WriteString(chunkSeparator)
		}
		body.WriteString(it.Text)
		n++
	}
	if n == 0 {
		body.WriteString(cutMiddle(items[0].Text, bodyBytes))
		n = 1
	}
	return []agentfleet.ChatMessage{
		{Role: agentfleet.RoleSystem, Content: system},
		{Role: agentfleet.RoleUser, Content: body.String()},
	}, n, nil
}

// cutMiddle shortens s to at most n bytes, keeping its head and tail
// (where a turn's script and its result's end are) around a marker.
func cutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := "\n[… " + strconv.Itoa(len(s)) + " bytes, cut here to fit the summarizer …]\n"
	keep := max(n-len(marker), 0)
	head := truncateUTF8(s, keep*2/3)
	from := len(s) - (keep - len(head))
	for from < len(s) && !utf8RuneStart(s[from]) {
		from++
	}
	return head + marker + s[from:]
}

// summaryCall makes one summarizer call, charges it and journals it, and
// returns the summary it gave, or the one another attempt of the turn
// recorded first (reloading recorded, so the calls after replay that
// attempt's).
func summaryCall(ctx context.Context, req CompactRequest, mreq agentfleet.ModelRequest, index int, fp string,
	res *CompactResult, recorded *map[int]agentfleet.JournalEntry) (string, error) {
	tokens := agentfleet.EstimateTokens(mreq.Messages) + int64(mreq.MaxTokens)
	var hold *agentfleet.Reservation
	if req.Meter != nil {
		if req.Unlimited {
			r := req.Meter.ReserveUnlimited(req.Tenant, req.RunID, tokens)
			hold = &r
		} else {
			r, err := req.Meter.Reserve(ctx, req.Tenant, req.RunID, tokens)
			if err != nil {
				return "", fmt.Errorf("reserve %d tokens: %w", tokens, err)
			}
			hold = &r
		}
	}
	resp, err := req.Model.Complete(ctx, mreq)
	if err != nil {
		releaseHold(ctx, req.Meter, hold)
		return "", err
	}
	res.Calls++
	summary := strings.TrimSpace(resp.Content)
	charged := false
	if req.Journal != nil {
		result, _ := json.Marshal(summary) // a string: cannot fail
		e := agentfleet.JournalEntry{RunID: req.RunID, Turn: req.Turn, Index: index, Primitive: "ai", URL: fp, Result: result, Usage: resp.Usage}
		var existed bool
		existed, charged, err = req.Journal.JournalRecord(ctx, e, hold, resp.Model)
		if err == nil && existed {
			// Another attempt of the turn recorded this call first: its
			// summary is the one every attempt goes on from.
			if *recorded, err = journalEntries(ctx, req); err == nil {
				summary, err = replaySummary((*recorded)[index], fp)
			}
		}
	}
	if !charged {
		// Spent all the same: settled apart, or left to the caller.
		if req.Meter != nil {
			if serr := settleHold(ctx, req.Meter, hold, resp); serr != nil && err == nil {
				err = serr
			}
		} else {
			res.Charge = res.Charge.Add(resp.Usage)
		}
	}
	res.Usage = res.Usage.Add(resp.Usage)
	if err != nil {
		return "", err
	}
	if summary == "" {
		return "", errors.New("the summarizer replied with no summary")
	}
	return summary, nil
}

func journalEntries(ctx context.Context, req CompactRequest) (map[int]agentfleet.JournalEntry, error) {
	entries, err := req.Journal.JournalList(ctx, req.RunID, req.Turn)
	if err != nil {
		return nil, fmt.Errorf("compact: load the journal of turn %d: %w", req.Turn, err)
	}
	out := make(map[int]agentfleet.JournalEntry)
	for _, e := range entries {
		if e.Index >= SummaryJournalIndex {
			out[e.Index] = e
		}
	}
	return out, nil
}

// replaySummary is the summary a journal entry recorded for the call
// whose fingerprint is fp.
func replaySummary(rec agentfleet.JournalEntry, fp string) (string, error) {
	if rec.URL != fp {
		return "", fmt.Errorf("compact: %w", &agentfleet.JournalMismatchError{Recorded: rec, Call: agentfleet.JournalEntry{
			RunID: rec.RunID, Turn: rec.Turn, Index: rec.Index, Primitive: "ai", URL: fp}})
	}
	var s string
	if err := json.Unmarshal(rec.Result, &s); err != nil || s == "" {
		return "", fmt.Errorf("compact: journal entry %d of turn %d holds no summary", rec.Index, rec.Turn)
	}
	return s, nil
}

// fingerprint names a summarizer call by what it asks, so that an entry
// recorded for another call (the history changed between attempts) is
// not taken for this one's.
func fingerprint(model string, msgs []agentfleet.ChatMessage) string {
	h := sha256.New()
	h.Write([]byte(model))
	for _, m := range msgs {
		h.Write([]byte{0})
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.Content))
	}
	return "summary:" + hex.EncodeToString(h.Sum(nil)[:16])
}

func releaseHold(ctx context.Context, m Meter, hold *agentfleet.Reservation) {
	if hold == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = m.Release(rctx, *hold) // a failure leaves it to expire
}

func settleHold(ctx context.Context, m Meter, hold *agentfleet.Reservation, resp agentfleet.ModelResponse) error {
	if hold == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.Settle(sctx, *hold, resp.Usage, resp.Model); err != nil {
		return fmt.Errorf("settle %d tokens: %w", resp.Usage.Total(), err)
	}
	return nil
}
