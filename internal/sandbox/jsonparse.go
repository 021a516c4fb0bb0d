package sandbox

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A hand-written JSON parser for the carried args (and other JSON handed
// to scripts). goja's JSON.parse goes through encoding/json's Token API,
// which allocates for every token and costs about as much as the rest of
// a turn together; this one scans the document once, takes strings
// without escapes as substrings of it, and hands each value to a sink as
// soon as it is complete, so the only allocations are the sink's.
//
// It accepts exactly RFC 8259 JSON and gives what JavaScript's JSON.parse
// gives: keys in document order (a duplicate key keeps its first position
// and its last value, which is the sink's business), numbers as float64
// (1e400 is Infinity, -0 is -0), \u escapes decoded with surrogate pairs
// joined and lone surrogates kept (see jsonStr). Raw bytes that are not
// UTF-8 become U+FFFD, one per byte, as goja and encoding/json do.
// Nesting deeper than maxJSONDepth is refused, as encoding/json does
// (goja's JSON.parse has no bound); a turn cannot return what the next
// could not read (see jsonDeeperThan).

// maxJSONDepth bounds the nesting of arrays and objects, the same bound
// as encoding/json's, so anything the parser takes the Go side can read.
const maxJSONDepth = 10000

// jsonStr is a decoded JSON string. s is UTF-8, except that when lone is
// set it holds unpaired surrogates, encoded as UTF-8 would encode them
// if it could (WTF-8: three bytes, 0xED 0xA0-0xBF 0x80-0xBF). Raw input
// can never produce such bytes (they are not UTF-8, so become U+FFFD), so
// lone says exactly that s came from \uD8xx-style escapes.
type jsonStr struct {
	s    string
	lone bool
}

// jsonSink builds the values of a document bottom-up. array and object
// get slices that are valid only during the call.
type jsonSink[V any] interface {
	null() V
	boolean(b bool) V
	number(f float64) V
	str(s jsonStr) V
	array(elems []V) V
	object(keys []jsonStr, vals []V) V
}

// jsonSyntaxError says what is wrong with a document and where.
type jsonSyntaxError struct {
	msg    string
	offset int
}

func (e *jsonSyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.offset)
}

// parseJSONWith parses doc into a value built by sink.
func parseJSONWith[V any, S jsonSink[V]](doc string, sink S) (V, error) {
	p := jsonParser[V, S]{s: doc, sink: sink}
	v, err := p.value()
	if err == nil {
		p.skipSpace()
		if p.i < len(p.s) {
			err = p.unexpected("after the JSON value")
		}
	}
	if err != nil {
		var zero V
		return zero, err
	}
	return v, nil
}

type jsonParser[V any, S jsonSink[V]] struct {
	s     string
	i     int
	sink  S
	depth int
	vals  []V       // elements and member values of the open containers
	keys  []jsonStr // member names of the open objects
	buf   []byte    // scratch for strings with escapes
}

func (p *jsonParser[V, S]) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser[V, S]) fail(msg string) error {
	return &jsonSyntaxError{msg: msg, offset: p.i}
}

// unexpected reports the byte at p.i (or the end of input).
func (p *jsonParser[V, S]) unexpected(where string) error {
	if p.i >= len(p.s) {
		return p.fail("unexpected end of JSON input")
	}
	c := p.s[p.i]
	what := fmt.Sprintf("character %q", c)
	if c >= utf8.RuneSelf {
		r, _ := utf8.DecodeRuneInString(p.s[p.i:])
		what = fmt.Sprintf("character %q", r)
	}
	if where != "" {
		what += " " + where
	}
	return p.fail("unexpected " + what)
}

func (p *jsonParser[V, S]) value() (V, error) {
	var zero V
	p.skipSpace()
	if p.i >= len(p.s) {
		return zero, p.unexpected("")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		if err != nil {
			return zero, err
		}
		return p.sink.str(s), nil
	case c == '-' || c >= '0' && c <= '9':
		f, err := p.number()
		if err != nil {
			return zero, err
		}
		return p.sink.number(f), nil
	case c == 't':
		if err := p.literal("true"); err != nil {
			return zero, err
		}
		return p.sink.boolean(true), nil
	case c == 'f':
		if err := p.literal("false"); err != nil {
			return zero, err
		}
		return p.sink.boolean(false), nil
	case c == 'n':
		if err := p.literal("null"); err != nil {
			return zero, err
		}
		return p.sink.null(), nil
	}
	return zero, p.unexpected("")
}

func (p *jsonParser[V, S]) literal(word string) error {
	for j := 0; j < len(word); j++ {
		if p.i >= len(p.s) || p.s[p.i] != word[j] {
			return p.unexpected("in literal " + word)
		}
		p.i++
	}
	return nil
}

func (p *jsonParser[V, S]) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return p.fail(fmt.Sprintf("JSON nested too deeply (more than %d levels)", maxJSONDepth))
	}
	return nil
}

func (p *jsonParser[V, S]) array() (V, error) {
	var zero V
	if err := p.enter(); err != nil {
		return zero, err
	}
	p.i++ // [
	mark := len(p.vals)
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
	} else {
		for {
			v, err := p.value()
			if err != nil {
				return zero, err
			}
			p.vals = append(p.vals, v)
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				break
			}
			return zero, p.unexpected("in array (expected , or ])")
		}
	}
	v := p.sink.array(p.vals[mark:])
	clear(p.vals[mark:])
	p.vals = p.vals[:mark]
	p.depth--
	return v, nil
}

func (p *jsonParser[V, S]) object() (V, error) {
	var zero V
	if err := p.enter(); err != nil {
		return zero, err
	}
	p.i++ // {
	mark, kmark := len(p.vals), len(p.keys)
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
	} else {
		for {
			p.skipSpace()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return zero, p.unexpected("in object (expected a property name in double quotes)")
			}
			k, err := p.str()
			if err != nil {
				return zero, err
			}
			p.skipSpace()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return zero, p.unexpected("in object (expected :)")
			}
			p.i++
			v, err := p.value()
			if err != nil {
				return zero, err
			}
			p.keys = append(p.keys, k)
			p.vals = append(p.vals, v)
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				break
			}
			return zero, p.unexpected("in object (expected , or })")
		}
	}
	v := p.sink.object(p.keys[kmark:], p.vals[mark:])
	clear(p.vals[mark:])
	p.vals = p.vals[:mark]
	p.keys = p.keys[:kmark]
	p.depth--
	return v, nil
}

// str scans a string at p.i (the opening quote). Without escapes or
// bad bytes it is a substring of the document: no copy.
func (p *jsonParser[V, S]) str() (jsonStr, error) {
	p.i++ // "
	start := p.i
	ascii := true
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			s := p.s[start:p.i]
			p.i++
			if !ascii && !utf8.ValidString(s) {
				s = sanitizeUTF8(s)
			}
			return jsonStr{s: s}, nil
		case c == '\\':
			return p.strSlow(start, ascii)
		case c < 0x20:
			return jsonStr{}, p.fail("unexpected control character in string")
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return jsonStr{}, p.fail("unterminated string")
}

// strSlow continues a string with escapes at p.i, copying it into
// p.buf.
func (p *jsonParser[V, S]) strSlow(start int, ascii bool) (jsonStr, error) {
	b := append(p.buf[:0], p.s[start:p.i]...)
	if !ascii && !utf8.Valid(b) {
		b = []byte(sanitizeUTF8(string(b)))
	}
	lone := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			p.buf = b
			return jsonStr{s: string(b), lone: lone}, nil
		case c < 0x20:
			return jsonStr{}, p.fail("unexpected control character in string")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			if r == utf8.RuneError && n == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, p.s[p.i:p.i+n]...)
			}
			p.i += n
			continue
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		// An escape.
		if p.i+1 >= len(p.s) {
			p.i = len(p.s)
			return jsonStr{}, p.fail("unterminated string")
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return jsonStr{}, p.fail(`bad \u escape in string`)
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				// A high surrogate: joined with a \u low surrogate right
				// after it, else kept alone.
				if p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					r2, ok := p.hex4()
					if ok && r2 >= 0xDC00 && r2 < 0xE000 {
						b = utf8.AppendRune(b, 0x10000+(r-0xD800)<<10+(r2-0xDC00))
						continue
					}
					p.i = save
				}
				b = appendSurrogate(b, r)
				lone = true
			case r >= 0xDC00 && r < 0xE000:
				b = appendSurrogate(b, r)
				lone = true
			default:
				b = utf8.AppendRune(b, r)
			}
		default:
			p.i -= 2
			return jsonStr{}, p.fail(fmt.Sprintf("bad escape \\%c in string", e))
		}
	}
	return jsonStr{}, p.fail("unterminated string")
}

// hex4 reads the four hex digits of a \u escape at p.i.
func (p *jsonParser[V, S]) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	var r rune
	for j := 0; j < 4; j++ {
		c := p.s[p.i+j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}

// appendSurrogate appends a lone surrogate code unit in WTF-8.
func appendSurrogate(b []byte, r rune) []byte {
	return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}

// sanitizeUTF8 replaces every byte that is not part of a valid UTF-8
// sequence with U+FFFD, one per byte (strings.ToValidUTF8 would replace a
// run with one).
func sanitizeUTF8(s string) string {
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// number scans a number at p.i.
func (p *jsonParser[V, S]) number() (float64, error) {
	start := p.i
	neg := false
	if p.s[p.i] == '-' {
		neg = true
		p.i++
	}
	intStart := p.i
	switch {
	case p.i < len(p.s) && p.s[p.i] == '0':
		p.i++
	case p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9':
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
	default:
		return 0, p.unexpected("in number (expected a digit)")
	}
	intEnd := p.i
	simple := true
	if p.i < len(p.s) && p.s[p.i] == '.' {
		simple = false
		p.i++
		if !p.digits() {
			return 0, p.unexpected("in number (expected a digit after .)")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		simple = false
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return 0, p.unexpected("in number (expected a digit in the exponent)")
		}
	}
	// Integers of up to 15 digits are exact in a float64: no need for
	// the general conversion.
	if simple && intEnd-intStart <= 15 {
		var n int64
		for _, c := range []byte(p.s[intStart:intEnd]) {
			n = n*10 + int64(c-'0')
		}
		f := float64(n)
		if neg {
			f = -f // -0 stays -0
		}
		return f, nil
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if err != nil {
		// Only a range error is possible on valid syntax: the result is
		// ±Inf (or ±0), as in JavaScript.
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			p.i = start
			return 0, p.fail("bad number")
		}
	}
	return f, nil
}

func (p *jsonParser[V, S]) digits() bool {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// wtf8ToUTF16 decodes a jsonStr with lone surrogates into UTF-16 code
// units.
func wtf8ToUTF16(s string) []uint16 {
	u := make([]uint16, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 {
			// A surrogate in WTF-8.
			u = append(u, uint16(c&0x0F)<<12|uint16(s[i+1]&0x3F)<<6|uint16(s[i+2]&0x3F))
			i += 3
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r >= 0x10000 {
			r -= 0x10000
			u = append(u, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
			continue
		}
		u = append(u, uint16(r))
	}
	return u
}

// utf8Key is a name with lone surrogates as a property key: goja's Go
// API takes keys as UTF-8 strings, so they become U+FFFD there.
func (s jsonStr) utf8Key() string {
	if !s.lone {
		return s.s
	}
	b := make([]byte, 0, len(s.s))
	for i := 0; i < len(s.s); {
		if s.s[i] == 0xED && i+2 < len(s.s) && s.s[i+1] >= 0xA0 {
			b = utf8.AppendRune(b, utf8.RuneError)
			i += 3
			continue
		}
		r, n := utf8.DecodeRuneInString(s.s[i:])
		b = utf8.AppendRune(b, r)
		i += n
	}
	return string(b)
}

// jsonDeeperThan reports whether a well-formed JSON document nests arrays
// and objects more than max levels deep. Every level takes two bytes, so
// a document of up to 2*max bytes is not even scanned.
func jsonDeeperThan(doc []byte, max int) bool {
	if len(doc) <= 2*max {
		return false
	}
	depth := 0
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			// To the closing quote: the next one not escaped.
			for {
				j := bytes.IndexByte(doc[i+1:], '"')
				if j < 0 {
					return false
				}
				i += j + 1
				n := 0
				for k := i - 1; doc[k] == '\\'; k-- {
					n++
				}
				if n%2 == 0 {
					break
				}
			}
		case '[', '{':
			depth++
			if depth > max {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}
