package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
// DigestMaxKeys list the first keys and "…N more", and the whole digest
// is cut at DigestMaxBytes. Empty input means the script returned nothing.
func Digest(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "undefined"
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return "unparseable value"
	}
	s := shapeOf(v, 0)
	if len(s) > DigestMaxBytes {
		s = truncateUTF8(s, DigestMaxBytes) + digestEllipsis
	}
	return s
}

// decodeJSON decodes keeping numbers as json.Number (no float rounding
// work we would throw away) and objects as ordered key lists.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// object keeps keys and values; shapes sort the keys themselves.
type object struct {
	keys   []string
	values []any
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var o object
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.values = append(o.values, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return &o, nil
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			if a == nil {
				a = []any{}
			}
			return a, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	default:
		return tok, nil
	}
}

func shapeOf(v any, depth int) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return arrayShape(t, depth)
	case *object:
		return objectShape(t, depth)
	}
	return "unknown"
}

func objectShape(o *object, depth int) string {
	if len(o.keys) == 0 {
		return "{}"
	}
	if depth >= DigestMaxDepth {
		return "{" + digestEllipsis + "}"
	}
	idx := make([]int, len(o.keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(o.keys[a], o.keys[b]) })
	var b strings.Builder
	b.WriteByte('{')
	for n, i := range idx {
		if n == DigestMaxKeys {
			fmt.Fprintf(&b, ", %s%d more", digestEllipsis, len(idx)-n)
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(digestKey(o.keys[i]))
		b.WriteString(": ")
		b.WriteString(shapeOf(o.values[i], depth+1))
	}
	b.WriteByte('}')
	return b.String()
}

// arrayShape renders T[n]. Element shapes are inferred from a sample;
// differing shapes become a union, and too many distinct ones "any".
func arrayShape(a []any, depth int) string {
	if len(a) == 0 {
		return "[]"
	}
	if depth >= DigestMaxDepth {
		return fmt.Sprintf("[%s][%d]", digestEllipsis, len(a))
	}
	var shapes []string
	sample := a
	if len(sample) > DigestMaxSample {
		sample = sample[:DigestMaxSample]
	}
	for _, e := range sample {
		s := shapeOf(e, depth+1)
		if !slices.Contains(shapes, s) {
			shapes = append(shapes, s)
		}
	}
	elem := shapes[0]
	switch {
	case len(shapes) > DigestMaxUnion:
		elem = "any"
	case len(shapes) > 1:
		elem = "(" + strings.Join(shapes, " | ") + ")"
	}
	return fmt.Sprintf("%s[%d]", elem, len(a))
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
