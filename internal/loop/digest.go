package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Digest bounds. The digest is what the model sees of the carried value
// instead of the value itself, so it must stay small whatever the value:
// depth and width are capped and array elements are sampled.
const (
	DigestMaxDepth  = 4
	DigestMaxKeys   = 16
	DigestMaxSample = 32 // array elements inspected to infer an element shape
	DigestMaxUnion  = 3  // distinct element shapes listed before collapsing to "any"
	DigestMaxBytes  = 600
	digestEllipsis  = "…"
)

// Digest renders the structural shape of a JSON value in a TypeScript-like
// notation: keys (sorted), types and array lengths, never values.
//
//	{items: {id: number, name: string, price: number, tags: string[2]}[200], total: number}
//
// Objects deeper than DigestMaxDepth become {…}, objects wider than
// DigestMaxKeys list the first keys and "…N more", array element shapes
// are inferred from the first DigestMaxSample elements, and the whole
// digest is cut at DigestMaxBytes. Empty input means the script returned
// nothing.
//
// It runs on every turn's carried value, which may be megabytes, so it
// scans the bytes once without decoding them: values it does not need
// (strings, numbers, elements past the sample) are skipped, not parsed.
func Digest(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "undefined"
	}
	sc := scanner{b: raw}
	shape, ok := sc.shape(0)
	sc.ws()
	if !ok || sc.i != len(sc.b) {
		return "unparseable value"
	}
	if len(shape) > DigestMaxBytes {
		shape = truncateUTF8(shape, DigestMaxBytes) + digestEllipsis
	}
	return shape
}

// scanner walks JSON text that is trusted to be well formed (it comes
// from the sandbox's serializer); on anything else it reports !ok rather
// than guessing.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// shape returns the shape of the value at the cursor and moves past it.
func (s *scanner) shape(depth int) (string, bool) {
	switch c := s.peek(); {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		return "string", s.skipString()
	case c == 't' || c == 'f':
		return "boolean", s.skipLiteral()
	case c == 'n':
		return "null", s.skipLiteral()
	case c == '-' || (c >= '0' && c <= '9'):
		return "number", s.skipLiteral()
	}
	return "", false
}

type member struct {
	key        string
	start, end int
}

func (s *scanner) object(depth int) (string, bool) {
	s.i++ // {
	var members []member
	if s.peek() == '}' {
		s.i++
		return "{}", true
	}
	for {
		if s.peek() != '"' {
			return "", false
		}
		ks := s.i
		if !s.skipString() {
			return "", false
		}
		key := string(s.b[ks+1 : s.i-1])
		if bytes.IndexByte(s.b[ks:s.i], '\\') >= 0 {
			if err := json.Unmarshal(s.b[ks:s.i], &key); err != nil {
				return "", false
			}
		}
		if s.peek() != ':' {
			return "", false
		}
		s.i++
		s.ws()
		vs := s.i
		if !s.skipValue() {
			return "", false
		}
		members = append(members, member{key: key, start: vs, end: s.i})
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return s.objectShape(members, depth), true
		default:
			return "", false
		}
	}
}

func (s *scanner) objectShape(members []member, depth int) string {
	if depth >= DigestMaxDepth {
		return "{" + digestEllipsis + "}"
	}
	slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	// Duplicate keys: the last one wins, as in JSON.parse.
	uniq := members[:0]
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			continue
		}
		uniq = append(uniq, m)
	}
	var b strings.Builder
	b.WriteByte('{')
	for n, m := range uniq {
		if n == DigestMaxKeys {
			fmt.Fprintf(&b, ", %s%d more", digestEllipsis, len(uniq)-n)
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(digestKey(m.key))
		b.WriteString(": ")
		sub := scanner{b: s.b[:m.end], i: m.start}
		shape, _ := sub.shape(depth + 1)
		b.WriteString(shape)
	}
	b.WriteByte('}')
	return b.String()
}

// array renders T[n]. Element shapes are inferred from a sample;
// differing shapes become a union, and too many distinct ones "any".
func (s *scanner) array(depth int) (string, bool) {
	s.i++ // [
	if s.peek() == ']' {
		s.i++
		return "[]", true
	}
	var shapes []string
	n := 0
	for {
		if n < DigestMaxSample && depth < DigestMaxDepth {
			shape, ok := s.shape(depth + 1)
			if !ok {
				return "", false
			}
			if !slices.Contains(shapes, shape) {
				shapes = append(shapes, shape)
			}
		} else if !s.skipValue() {
			return "", false
		}
		n++
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			if depth >= DigestMaxDepth {
				return fmt.Sprintf("[%s][%d]", digestEllipsis, n), true
			}
			elem := shapes[0]
			switch {
			case len(shapes) > DigestMaxUnion:
				elem = "any"
			case len(shapes) > 1:
				elem = "(" + strings.Join(shapes, " | ") + ")"
			}
			return fmt.Sprintf("%s[%d]", elem, n), true
		default:
			return "", false
		}
	}
}

// skipValue moves past the value at the cursor without looking into it.
func (s *scanner) skipValue() bool {
	switch c := s.peek(); c {
	case '"':
		return s.skipString()
	case '{', '[':
		level := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				level++
			case '}', ']':
				level--
				if level == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	case 0:
		return false
	default:
		return s.skipLiteral()
	}
}

func (s *scanner) skipString() bool {
	s.i++ // opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return true
		}
		s.i++
	}
	return false
}

// skipLiteral moves past a number, true, false or null.
func (s *scanner) skipLiteral() bool {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}

// digestKey quotes keys that are not plain identifiers, as TypeScript would.
func digestKey(k string) string {
	if k == "" {
		return `""`
	}
	for i, r := range k {
		ok := r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			q, _ := json.Marshal(k)
			return string(q)
		}
	}
	return k
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
