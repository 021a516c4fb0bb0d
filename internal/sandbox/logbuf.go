package sandbox

import (
	"fmt"
	"unicode/utf8"
)

// logBuffer keeps at most limit bytes of log output: the first half and
// the most recent half, with the cut marked. The head says what the
// script set out to do, the tail how it ended; the middle of a runaway
// loop's output is the least informative part. Memory stays bounded
// however much the script logs.
type logBuffer struct {
	limit int
	head  []byte // up to limit/2
	tail  []byte // ring of up to limit - limit/2 bytes
	tpos  int    // next write position in tail once it is full
	total int64  // bytes written
}

func (b *logBuffer) reset(limit int) {
	b.limit = limit
	b.head = b.head[:0]
	b.tail = b.tail[:0]
	b.tpos = 0
	b.total = 0
}

func (b *logBuffer) WriteString(s string) {
	b.total += int64(len(s))
	headCap := b.limit / 2
	if n := headCap - len(b.head); n > 0 {
		if n > len(s) {
			n = len(s)
		}
		b.head = append(b.head, s[:n]...)
		s = s[n:]
	}
	tailCap := b.limit - headCap
	if len(s) >= tailCap {
		b.tail = append(b.tail[:0], s[len(s)-tailCap:]...)
		b.tpos = 0
		return
	}
	for len(s) > 0 {
		if len(b.tail) < tailCap {
			n := min(tailCap-len(b.tail), len(s))
			b.tail = append(b.tail, s[:n]...)
			s = s[n:]
			continue
		}
		n := copy(b.tail[b.tpos:], s)
		b.tpos = (b.tpos + n) % tailCap
		s = s[n:]
	}
}

// parts returns the kept log: all of it in head when nothing was cut;
// else the head and the tail, moved to rune boundaries so each stays
// valid UTF-8, and how many bytes were dropped between them. The child
// sends the parts rather than the joined text so that the parent, which
// redacts, can see where the cut is (redactor.logs).
func (b *logBuffer) parts() (head, tail string, cut int64) {
	kept := int64(len(b.head) + len(b.tail))
	if b.total <= int64(b.limit) && b.total == kept {
		return string(b.head) + string(b.tail), "", 0
	}
	t := make([]byte, 0, len(b.tail))
	t = append(t, b.tail[b.tpos:]...)
	t = append(t, b.tail[:b.tpos]...)
	h := trimPartialRune(b.head)
	for len(t) > 0 && !utf8.RuneStart(t[0]) {
		t = t[1:]
	}
	return string(h), string(t), b.total - int64(len(h)) - int64(len(t))
}

// String renders the kept log as joinLog does.
func (b *logBuffer) String() string { return joinLog(b.parts()) }

// joinLog renders a log's parts, marking the cut with the number of
// bytes dropped.
func joinLog(head, tail string, cut int64) string {
	if cut == 0 {
		return head + tail
	}
	return fmt.Sprintf("%s\n… [%d bytes of log cut] …\n%s", head, cut, tail)
}

// trimPartialRune drops an incomplete rune at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
