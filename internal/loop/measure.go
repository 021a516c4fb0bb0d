// Prompt measurement: what a run's model calls sent, and how much of each
// call a provider's prompt cache could reuse on the next.

package loop

import (
	"unicode/utf8"

	"github.com/agentfleet/agentfleet"
)

// PromptStats measures the prompts of a run's model calls, in call order.
type PromptStats struct {
	// Chars is each call's prompt size: the characters of its
	// messages' contents.
	Chars []int
	// TotalChars sums Chars.
	TotalChars int
	// PrefixShares[i] is the share (0 to 1) of call i's prompt that is
	// a prefix of call i+1's: whole messages alike, then the common
	// start of the first message that differs, as a provider's prompt
	// cache matches. It has one entry fewer than Chars.
	PrefixShares []float64
	// MinPrefixShare is the smallest of PrefixShares (1 with fewer than
	// two calls).
	MinPrefixShare float64
}

// MeasurePrompts measures the prompts of consecutive model calls (as a
// fake model received them).
func MeasurePrompts(prompts [][]agentfleet.ChatMessage) PromptStats {
	st := PromptStats{Chars: make([]int, len(prompts)), MinPrefixShare: 1}
	for i, p := range prompts {
		st.Chars[i] = promptChars(p)
		st.TotalChars += st.Chars[i]
		if i == 0 {
			continue
		}
		share := 1.0
		if prev := st.Chars[i-1]; prev > 0 {
			share = float64(commonPrefixChars(prompts[i-1], p)) / float64(prev)
		}
		st.PrefixShares = append(st.PrefixShares, share)
		st.MinPrefixShare = min(st.MinPrefixShare, share)
	}
	return st
}

func promptChars(msgs []agentfleet.ChatMessage) int {
	n := 0
	for _, m := range msgs {
		n += utf8.RuneCountInString(m.Content)
	}
	return n
}

// commonPrefixChars counts the characters of a that b starts with:
// messages of the same role and content, then the common start of the
// first pair that differs.
func commonPrefixChars(a, b []agentfleet.ChatMessage) int {
	n := 0
	for i := range a {
		if i >= len(b) || a[i].Role != b[i].Role {
			return n
		}
		if a[i].Content == b[i].Content {
			n += utf8.RuneCountInString(a[i].Content)
			continue
		}
		x, y := a[i].Content, b[i].Content
		j := 0
		for j < len(x) && j < len(y) && x[j] == y[j] {
			j++
		}
		for j > 0 && j < len(x) && !utf8.RuneStart(x[j]) {
			j--
		}
		return n + utf8.RuneCountInString(x[:j])
	}
	return n
}
