package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// redactor replaces known secret values (ExecRequest.Secrets) in what a
// sandbox process reports. It runs in the parent, on the result frame:
// the process is untrusted and is never sent a secret. Each secret is
// also replaced in its JSON-escaped form, which is how it appears inside
// a serialized return value or a logged object. A nil redactor redacts
// nothing.
type redactor struct {
	r *strings.Replacer
	// forms are the secrets and their JSON-escaped forms, for the
	// pieces a cut leaves (cutEnd, cutStart) and for found; rawForms
	// are the same as bytes, for foundIn.
	forms    []string
	rawForms [][]byte
}

const redacted = "[redacted]"

// partialMin is the shortest piece of a secret that is redacted where a
// cut (of the log, of an error message) splits it: a shorter piece says
// nothing of the secret and is too likely to be ordinary text.
const partialMin = 4

func newRedactor(secrets []string) *redactor {
	var r redactor
	var pairs []string
	add := func(s string) {
		if s != "" && !slices.Contains(r.forms, s) {
			r.forms = append(r.forms, s)
			r.rawForms = append(r.rawForms, []byte(s))
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
	r.r = strings.NewReplacer(pairs...)
	return &r
}

// redactorEntry is the last redactor a pool built, with its secrets.
type redactorEntry struct {
	secrets []string
	r       *redactor
}

// redactorFor returns the redactor of secrets, reusing the last one
// built: a worker passes the same secrets (its provider key) every turn.
func (p *Pool) redactorFor(secrets []string) *redactor {
	if len(secrets) == 0 {
		return nil
	}
	if e := p.red.Load(); e != nil && slices.Equal(e.secrets, secrets) {
		return e.r
	}
	e := &redactorEntry{secrets: slices.Clone(secrets), r: newRedactor(secrets)}
	p.red.Store(e)
	return e.r
}

func (r *redactor) str(s string) string {
	if r == nil || !r.found(s) {
		return s
	}
	return r.r.Replace(s)
}

// found says whether s holds a secret. It is the common case's whole
// cost: no copy of a document with no secret in it.
func (r *redactor) found(s string) bool {
	for _, f := range r.forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

func (r *redactor) foundIn(doc []byte) bool {
	for _, f := range r.rawForms {
		if bytes.Contains(doc, f) {
			return true
		}
	}
	return false
}

// cutEnd redacts s, which a cut ended: the beginning of a secret left at
// its end is redacted too.
func (r *redactor) cutEnd(s string) string { return r.cutAt(s, true) }

// cutStart redacts s, which a cut began: the end of a secret left at its
// start is redacted too.
func (r *redactor) cutStart(s string) string { return r.cutAt(s, false) }

func (r *redactor) cutAt(s string, end bool) string {
	if r == nil {
		return s
	}
	s = r.r.Replace(s)
	best := 0 // the longest piece of a secret at the cut
	for _, f := range r.forms {
		for k := min(len(f)-1, len(s)); k >= partialMin && k > best; k-- {
			if end && strings.HasSuffix(s, f[:k]) || !end && strings.HasPrefix(s, f[len(f)-k:]) {
				best = k
				break
			}
		}
	}
	switch {
	case best == 0:
		return s
	case end:
		return s[:len(s)-best] + redacted
	}
	return redacted + s[best:]
}

// logs redacts a log's parts (logBuffer.parts) and joins them. A secret
// split by the cut is redacted on both sides of it.
func (r *redactor) logs(head, tail string, cut int64) string {
	if cut == 0 {
		return r.str(head + tail)
	}
	return joinLog(r.cutEnd(head), r.cutStart(tail), cut)
}

// message redacts an error message and caps it at maxErrMessage.
// dropped is what the process already cut from its end (clipMessage).
func (r *redactor) message(s string, dropped int) string {
	if dropped > 0 {
		s = r.cutEnd(s)
	} else {
		s = r.str(s)
	}
	return capMessage(s, dropped)
}

// capMessage caps an error message shown to the model at maxErrMessage
// (a script can throw a megabyte string), counting dropped bytes already
// cut from its end.
func capMessage(s string, dropped int) string {
	if len(s) <= maxErrMessage && dropped == 0 {
		return s
	}
	kept := s
	if len(s) > maxErrMessage {
		kept = string(trimPartialRune([]byte(s[:maxErrMessage])))
	}
	return fmt.Sprintf("%s… [%d bytes cut]", kept, len(s)-len(kept)+dropped)
}

// json redacts a JSON document. Textual replacement keeps the common case
// cheap; when it would break the document (a secret that is a number, or
// JSON syntax) the value is redacted structurally instead.
func (r *redactor) json(doc []byte) []byte {
	if r == nil || !r.foundIn(doc) {
		return doc
	}
	s := r.r.Replace(string(doc))
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
