package redact

import (
	"strings"
	"unicode/utf8"
)

// Stream redacts a text that arrives in pieces (a streamed model reply):
// each Write returns what of the text so far can be shown, redacted, and
// holds back a tail that could still become a value (at most the longest
// value's length), so no piece it returns carries part of a value, even
// of one split across two writes. The pieces Write and Flush return,
// concatenated, equal Redactor.String of the whole text. A Stream of a
// nil Redactor holds nothing back.
type Stream struct {
	r       *Redactor
	pending string // raw text not yet decided on
	carry   string // redacted text ending in an incomplete rune
	first   [256]bool
}

// NewStream returns a Stream redacting with r (nil: nothing).
func NewStream(r *Redactor) *Stream {
	s := &Stream{r: r}
	if r != nil {
		for _, f := range r.forms {
			s.first[f[0]] = true
		}
	}
	return s
}

// Write takes the next piece of the text and returns what can be shown
// now (possibly nothing).
func (s *Stream) Write(piece string) string {
	if s.r == nil {
		return piece
	}
	s.pending += piece
	return s.drain(false)
}

// Flush returns the rest, at the end of the text.
func (s *Stream) Flush() string {
	if s.r == nil {
		return ""
	}
	return s.drain(true)
}

// drain decides on the pending text from its start, as the Redactor's
// replacer would (at each position the first form, longest first, that
// begins there), stopping where the rest could still grow into a form
// unless final.
func (s *Stream) drain(final bool) string {
	p := s.pending
	var b strings.Builder
	b.WriteString(s.carry)
	plain, i := 0, 0
scan:
	for i < len(p) {
		if !s.first[p[i]] {
			i++
			continue
		}
		rest := p[i:]
		for f, form := range s.r.forms {
			if strings.HasPrefix(rest, form) {
				b.WriteString(p[plain:i])
				b.WriteString(s.r.labels[f])
				i += len(form)
				plain = i
				continue scan
			}
			if !final && len(rest) < len(form) && strings.HasPrefix(form, rest) {
				// More text may complete a longer form here.
				break scan
			}
		}
		i++
	}
	b.WriteString(p[plain:i])
	s.pending = p[i:]
	out := b.String()
	s.carry = ""
	if !final {
		cut := completeRunes(out)
		out, s.carry = out[:cut], out[cut:]
	}
	return out
}

// completeRunes is the length of s's longest prefix that does not end
// inside a multi-byte rune.
func completeRunes(s string) int {
	for back := 1; back <= utf8.UTFMax && back <= len(s); back++ {
		if utf8.RuneStart(s[len(s)-back]) {
			if utf8.FullRuneInString(s[len(s)-back:]) {
				return len(s)
			}
			return len(s) - back
		}
	}
	return len(s)
}
