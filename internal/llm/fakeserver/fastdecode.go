package fakeserver

import (
	"bytes"
	"strconv"
)

// decodePlain decodes the request shape the fleet's client sends — model,
// messages of a role and a string content, max tokens, temperature,
// stream — in one pass over the body. encoding/json reads every byte of
// a request twice through its state machine (once to find the value's
// end, once to decode it) and the messages' text a third time; a request
// is mostly that text, and in the fleet's benchmarks this server, beside
// the fleet on the same cores, answered thousands a second with a third
// of its CPU in that decoding.
//
// ok is false for anything else: another key, content parts, a \u
// escape of a surrogate, a control character, malformed JSON.
// decodeRequest then decodes the body with encoding/json, which accepts
// every valid request and words the errors, so this path only has to be
// right on what it accepts.
func decodePlain(b []byte) (wr wireRequest, ok bool) {
	p := plainParser{b: b}
	ok = p.object(func(key string) bool {
		switch key {
		case "model":
			wr.Model, ok = p.str()
		case "messages":
			wr.Messages, ok = p.messages()
		case "max_tokens":
			wr.MaxTokens, ok = p.int()
		case "max_completion_tokens":
			wr.MaxCompletionTokens, ok = p.int()
		case "temperature":
			var t float64
			t, ok = p.float()
			wr.Temperature = &t
		case "stream":
			wr.Stream, ok = p.boolean()
		default:
			return false
		}
		return ok
	})
	return wr, ok && p.end()
}

type plainParser struct {
	b []byte
	i int
}

func (p *plainParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, if c is next.
func (p *plainParser) consume(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (p *plainParser) end() bool {
	p.space()
	return p.i == len(p.b)
}

// object reads an object, handing each key to field, which reads the
// value and reports whether it could.
func (p *plainParser) object(field func(key string) bool) bool {
	if !p.consume('{') {
		return false
	}
	if p.consume('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.consume(':') || !field(key) {
			return false
		}
		if p.consume('}') {
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// str reads a string with no control characters and no escapes that
// unquotePlain leaves to encoding/json.
func (p *plainParser) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	start := p.i - 1
	for {
		j := bytes.IndexByte(p.b[p.i:], '"')
		if j < 0 {
			return "", false
		}
		p.i += j + 1
		// The quote ends the string unless an odd run of backslashes
		// escapes it.
		n := 0
		for k := p.i - 2; k > start && p.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			break
		}
	}
	lit := p.b[start:p.i]
	for _, c := range lit {
		if c < 0x20 {
			return "", false
		}
	}
	return unquotePlain(lit)
}

func (p *plainParser) messages() ([]wireMessage, bool) {
	if !p.consume('[') {
		return nil, false
	}
	if p.consume(']') {
		return []wireMessage{}, true
	}
	var ms []wireMessage
	for {
		m, ok := p.message()
		if !ok {
			return nil, false
		}
		ms = append(ms, m)
		if p.consume(']') {
			return ms, true
		}
		if !p.consume(',') {
			return nil, false
		}
	}
}

func (p *plainParser) message() (m wireMessage, ok bool) {
	ok = p.object(func(key string) bool {
		switch key {
		case "role":
			m.Role, ok = p.str()
		case "content":
			var s string
			s, ok = p.str()
			m.Content = messageContent(s)
		default:
			return false
		}
		return ok
	})
	return m, ok
}

// number returns the number that starts here, if it is one by JSON's
// grammar (strconv also takes +1, .5, 01 and 0x1p3).
func (p *plainParser) number() (string, bool) {
	p.space()
	start := p.i
	digits := func() bool {
		n := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		return p.i > n
	}
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if !digits() {
		return "", false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if !digits() {
			return "", false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !digits() {
			return "", false
		}
	}
	return string(p.b[start:p.i]), true
}

func (p *plainParser) int() (int, bool) {
	num, ok := p.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil
}

func (p *plainParser) float() (float64, bool) {
	num, ok := p.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	return f, err == nil
}

func (p *plainParser) boolean() (bool, bool) {
	p.space()
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return true, true
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return false, true
	}
	return false, false
}
