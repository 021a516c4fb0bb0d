// Package redact replaces secret values, and text shaped like common
// credentials, in what a turn records or sends: events, steps, logs,
// answers, errors, digests, approval previews, prompts and span
// attributes. It owns the labels ("[secret:<name>]", "[redacted]") and
// the credential shapes; it knows nothing of where the values come from.
package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// Unnamed is the label of a value without a name (the provider key), and
// of text shaped like a credential.
const Unnamed = "[redacted]"

// Label is what a value named name becomes: "[secret:<name>]", or
// Unnamed when name is empty.
func Label(name string) string {
	if name == "" {
		return Unnamed
	}
	return "[secret:" + name + "]"
}

// Value is a value to redact and the name it is shown by ("" for
// Unnamed).
type Value struct {
	Name, Value string
}

// Values gathers the values of a turn: unnamed ones, then the named
// secrets of each list, in order (New keeps a value listed twice by its
// first name).
func Values(unnamed []string, named ...[]agentfleet.OpenSecret) []Value {
	n := len(unnamed)
	for _, l := range named {
		n += len(l)
	}
	out := make([]Value, 0, n)
	for _, s := range unnamed {
		out = append(out, Value{Value: s})
	}
	for _, l := range named {
		for _, s := range l {
			out = append(out, Value{Name: s.Name, Value: s.Value})
		}
	}
	return out
}

// Redactor replaces known values, each also in its JSON-escaped form
// (how it appears inside a serialized value or a logged object), by its
// label. A nil Redactor redacts nothing.
type Redactor struct {
	r *strings.Replacer
	// forms are the values and their JSON-escaped forms, longest
	// first (a value that begins another is not replaced inside it),
	// with labels[i] the label of forms[i] and raw[i] its bytes.
	forms  []string
	labels []string
	raw    [][]byte
}

// New returns the Redactor of vs, or nil when there is no value to
// redact.
func New(vs []Value) *Redactor {
	type form struct{ s, label string }
	var fs []form
	add := func(s, label string) {
		if s == "" || slices.ContainsFunc(fs, func(f form) bool { return f.s == s }) {
			return
		}
		fs = append(fs, form{s, label})
	}
	for _, v := range vs {
		if v.Value == "" {
			continue
		}
		add(v.Value, Label(v.Name))
		add(jsonEscape(v.Value), Label(v.Name))
	}
	if len(fs) == 0 {
		return nil
	}
	slices.SortStableFunc(fs, func(a, b form) int { return len(b.s) - len(a.s) })
	r := &Redactor{}
	pairs := make([]string, 0, 2*len(fs))
	for _, f := range fs {
		r.forms = append(r.forms, f.s)
		r.labels = append(r.labels, f.label)
		r.raw = append(r.raw, []byte(f.s))
		pairs = append(pairs, f.s, f.label)
	}
	r.r = strings.NewReplacer(pairs...)
	return r
}

// Len is the number of forms r replaces; Form(i) is one and its label.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	return len(r.forms)
}

func (r *Redactor) Form(i int) (form, label string) { return r.forms[i], r.labels[i] }

// String redacts s. It copies nothing when s holds no value.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	first := r.firstForm(func(f int) bool { return strings.Contains(s, r.forms[f]) })
	if first < 0 {
		return s
	}
	return r.replacerFrom(first, func(f int) bool { return strings.Contains(s, r.forms[f]) }).Replace(s)
}

// firstForm is the index of the first form present, or -1.
func (r *Redactor) firstForm(present func(int) bool) int {
	for f := range r.forms {
		if present(f) {
			return f
		}
	}
	return -1
}

// replacerFrom is the replacer for a text in which form first is the
// first present: when it is the only one, a replacer of that one form,
// which searches as fast as strings.Index does (the replacer of every
// form walks a trie byte by byte, ten times slower on a long text).
func (r *Redactor) replacerFrom(first int, present func(int) bool) *strings.Replacer {
	for f := first + 1; f < len(r.forms); f++ {
		if present(f) {
			return r.r
		}
	}
	return strings.NewReplacer(r.forms[first], r.labels[first])
}

// Replace redacts s without looking first.
func (r *Redactor) Replace(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}

// Found says whether s holds a value: the whole cost of the common case.
func (r *Redactor) Found(s string) bool {
	if r == nil {
		return false
	}
	for _, f := range r.forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// FoundIn is Found for bytes.
func (r *Redactor) FoundIn(doc []byte) bool {
	if r == nil {
		return false
	}
	for _, f := range r.raw {
		if bytes.Contains(doc, f) {
			return true
		}
	}
	return false
}

// JSON redacts a JSON document. Textual replacement keeps the common case
// cheap; when it would break the document (a value that is a number, or
// JSON syntax) the document is redacted value by value instead.
func (r *Redactor) JSON(doc []byte) []byte {
	if r == nil {
		return doc
	}
	present := func(f int) bool { return bytes.Contains(doc, r.raw[f]) }
	first := r.firstForm(present)
	if first < 0 {
		return doc
	}
	rep := r.replacerFrom(first, present)
	s := rep.Replace(string(doc))
	if json.Valid([]byte(s)) {
		return []byte(s)
	}
	return walkJSON(doc, rep.Replace)
}

// walkJSON applies fn to every string, number and key of doc.
func walkJSON(doc []byte, fn func(string) string) []byte {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return []byte(`"` + Unnamed + `"`)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(walk(v, fn)); err != nil {
		return []byte(`"` + Unnamed + `"`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func walk(v any, fn func(string) string) any {
	switch x := v.(type) {
	case string:
		return fn(x)
	case json.Number:
		if s := fn(x.String()); s != x.String() {
			return s
		}
		return x
	case []any:
		for i := range x {
			x[i] = walk(x[i], fn)
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fn(k)] = walk(e, fn)
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
