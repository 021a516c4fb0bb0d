package sandbox

import (
	"encoding/json"
	"fmt"
	"strings"
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

// String renders the kept log, marking the cut with the number of bytes
// dropped. The cut is moved to rune boundaries so the result stays valid
// UTF-8.
func (b *logBuffer) String() string {
	kept := int64(len(b.head) + len(b.tail))
	if b.total <= int64(b.limit) && b.total == kept {
		return string(b.head) + string(b.tail)
	}
	tail := make([]byte, 0, len(b.tail))
	tail = append(tail, b.tail[b.tpos:]...)
	tail = append(tail, b.tail[:b.tpos]...)
	head := trimPartialRune(b.head)
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	cut := b.total - int64(len(head)) - int64(len(tail))
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

// redactor replaces known secret values. Each secret is also replaced in
// its JSON-escaped form, which is how it appears inside a serialized
// return value or a logged object.
type redactor struct{ r *strings.Replacer }

const redacted = "[redacted]"

func newRedactor(secrets []string) *redactor {
	var pairs []string
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			pairs = append(pairs, s, redacted)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		add(s)
		add(jsonEscape(s))
	}
	if len(pairs) == 0 {
		return nil
	}
	return &redactor{r: strings.NewReplacer(pairs...)}
}

func (r *redactor) str(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}

// json redacts a JSON document. Textual replacement keeps the common case
// cheap; when it would break the document (a secret that is a number, or
// JSON syntax) the value is redacted structurally instead.
func (r *redactor) json(doc []byte) []byte {
	if r == nil || len(doc) == 0 {
		return doc
	}
	s := r.r.Replace(string(doc))
	if len(s) == len(doc) && s == string(doc) {
		return doc
	}
	if json.Valid([]byte(s)) {
		return []byte(s)
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return []byte(`"` + redacted + `"`)
	}
	out, err := json.Marshal(r.walk(v))
	if err != nil {
		return []byte(`"` + redacted + `"`)
	}
	return out
}

func (r *redactor) walk(v any) any {
	switch x := v.(type) {
	case string:
		return r.r.Replace(x)
	case json.Number:
		if s := r.r.Replace(x.String()); s != x.String() {
			return s
		}
		return x
	case []any:
		for i := range x {
			x[i] = r.walk(x[i])
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[r.r.Replace(k)] = r.walk(e)
		}
		return m
	}
	return v
}

// jsonEscape returns s as it appears between the quotes of a JSON string
// written by JSON.stringify (no HTML escaping).
func jsonEscape(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}
