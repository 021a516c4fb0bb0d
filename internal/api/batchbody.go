// The batch input reader: the body of POST /v1/batches read as a stream,
// JSON or JSONL, one input at a time, each held to the body limit of
// POST /v1/runs, so a batch is never held in memory whole.

package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentfleet/agentfleet/wire"
)

// batchBody reads the inputs of POST /v1/batches one at a time: the lines
// of a JSONL body, or the elements of a JSON body's "inputs", whose other
// fields it reads into req as they come.
type batchBody struct {
	req   wire.BatchCreateRequest
	jsonl bool
	lines *bufio.Reader
	dec   *json.Decoder
	// body is what dec reads, held to inputMax bytes past each value's
	// start, so an input larger than a run may be is never held whole.
	body *budgetReader
	// inputMax is the most bytes one input takes: the body limit of
	// POST /v1/runs, which every input obeys.
	inputMax int64
	// at is the 1-based line (JSONL) or input (JSON) last read.
	at int
	// inInputs says the JSON body's inputs array is being read, done
	// that the body has been read to its end.
	inInputs, done bool
}

func newBatchBody(r *http.Request, inputMax int64) (*batchBody, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	b := &batchBody{inputMax: inputMax}
	switch ct {
	case "application/x-ndjson", "application/jsonl", "application/x-jsonlines":
		b.jsonl = true
		b.lines = bufio.NewReaderSize(r.Body, 64<<10)
		return b, b.queryParams(r)
	case "", "application/json":
		b.body = &budgetReader{r: r.Body}
		b.dec = json.NewDecoder(b.body)
		b.budget()
		return b, b.beginJSON()
	}
	return nil, &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
		msg: fmt.Sprintf("Content-Type %q: send application/json or application/x-ndjson (one input a line)", ct)}
}

// queryParams reads a JSONL body's batch settings from the query.
func (b *batchBody) queryParams(r *http.Request) error {
	q := r.URL.Query()
	b.req.Agent, b.req.IdempotencyKey, b.req.CallbackURL = q.Get("agent"), q.Get("idempotency_key"), q.Get("callback_url")
	for _, f := range []struct {
		name string
		set  func(int64)
	}{
		{"max_concurrent", func(v int64) { b.req.MaxConcurrent = int(v) }},
		{"max_turns", func(v int64) { b.req.MaxTurns = int(v) }},
		{"max_tokens", func(v int64) { b.req.MaxTokens = v }},
	} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > 1<<40 {
				return errBadRequest("query parameter %s=%q must be a whole number, 0 or more", f.name, v)
			}
			f.set(n)
		}
	}
	for k, vs := range q {
		if name, ok := strings.CutPrefix(k, "metadata."); ok && len(vs) > 0 {
			if b.req.Metadata == nil {
				b.req.Metadata = map[string]string{}
			}
			b.req.Metadata[name] = vs[0]
		}
	}
	return nil
}

// perInput are the JSON body's fields that apply to every input, so must
// be known before the first.
var perInput = map[string]bool{"agent": true, "idempotency_key": true, "max_turns": true, "max_tokens": true}

// beginJSON reads the JSON body up to its inputs.
func (b *batchBody) beginJSON() error {
	tok, err := b.dec.Token()
	if err != nil {
		return jsonBodyError(err, "")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errBadRequest("request body must be a JSON object with \"inputs\", or JSONL (Content-Type: application/x-ndjson)")
	}
	return b.fields()
}

// fields reads the JSON object's fields until "inputs" starts or the
// object ends.
func (b *batchBody) fields() error {
	for b.budget(); b.dec.More(); b.budget() {
		tok, err := b.dec.Token()
		if err != nil {
			return jsonBodyError(err, "")
		}
		key, _ := tok.(string)
		if perInput[key] && b.at > 0 {
			return errBadRequest("field %q comes after inputs; it applies to every input, so put it before \"inputs\"", key)
		}
		var dst any
		switch key {
		case "inputs":
			if b.at > 0 {
				return errBadRequest("field \"inputs\" appears twice")
			}
			tok, err := b.dec.Token()
			if err != nil {
				return jsonBodyError(err, "inputs")
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return errBadRequest("field \"inputs\" must be an array of inputs")
			}
			b.inInputs = true
			return nil
		case "agent":
			dst = &b.req.Agent
		case "idempotency_key":
			dst = &b.req.IdempotencyKey
		case "max_turns":
			dst = &b.req.MaxTurns
		case "max_tokens":
			dst = &b.req.MaxTokens
		case "max_concurrent":
			dst = &b.req.MaxConcurrent
		case "metadata":
			dst = &b.req.Metadata
		case "callback_url":
			dst = &b.req.CallbackURL
		default:
			return errBadRequest("unknown field %q", key)
		}
		b.budget()
		if err := b.dec.Decode(dst); err != nil {
			if errors.Is(err, errOverBudget) {
				return b.tooLarge(fmt.Sprintf("field %q", key), key)
			}
			return jsonBodyError(err, key)
		}
	}
	if _, err := b.dec.Token(); err != nil { // the closing '}'
		return jsonBodyError(err, "")
	}
	if _, err := b.dec.Token(); !errors.Is(err, io.EOF) {
		return errBadRequest("request body has data after the JSON object; send one object")
	}
	b.done = true
	return nil
}

func jsonBodyError(err error, field string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errBadRequest("request body ends early: send one JSON object with \"inputs\"")
	}
	if field != "" {
		return errBadRequest("field %q: %v", field, err)
	}
	return errBadRequest("malformed JSON: %v", err)
}

// next returns the next input; ok is false after the last. An error is a
// 400 naming the line.
func (b *batchBody) next() (in wire.BatchInput, ok bool, err error) {
	if b.jsonl {
		return b.nextLine()
	}
	if b.done || !b.inInputs {
		return in, false, nil
	}
	if !b.dec.More() {
		if _, err := b.dec.Token(); err != nil { // the closing ']'
			return in, false, jsonBodyError(err, "inputs")
		}
		b.inInputs = false
		return in, false, b.fields()
	}
	b.at++
	in, err = b.nextElement()
	return in, err == nil, err
}

// nextElement reads one element of "inputs" a field at a time, each held
// to the input limit, so the error of an input too large names the field.
func (b *batchBody) nextElement() (in wire.BatchInput, err error) {
	fail := func(err error, field string) (wire.BatchInput, error) {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return in, err
		case errors.Is(err, errOverBudget) && field != "":
			return in, b.tooLarge(b.where(b.at), field)
		case errors.Is(err, errOverBudget):
			return in, b.tooLarge(b.where(b.at), "")
		}
		return in, errBadRequest("%s: %s", b.where(b.at), inputJSONError(err))
	}
	b.budget()
	tok, err := b.dec.Token()
	if err != nil {
		return fail(err, "")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return in, errBadRequest("%s: an input must be a JSON object, not %s", b.where(b.at), jsonTokenKind(tok))
	}
	obj := []byte{'{'}
	for b.dec.More() {
		tok, err := b.dec.Token()
		if err != nil {
			return fail(err, "")
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := b.dec.Decode(&raw); err != nil {
			return fail(err, key)
		}
		if len(obj) > 1 {
			obj = append(obj, ',')
		}
		k, _ := json.Marshal(key)
		obj = append(append(append(obj, k...), ':'), raw...)
	}
	if _, err := b.dec.Token(); err != nil { // the closing '}'
		return fail(err, "")
	}
	return in, decodeInput(append(obj, '}'), &in, b.where(b.at))
}

// decodeInput decodes one input's JSON object, refusing unknown fields.
func decodeInput(raw []byte, in *wire.BatchInput, where string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return errBadRequest("%s: %s", where, inputJSONError(err))
	}
	if dec.More() {
		return errBadRequest("%s: more than one JSON value; put one input object on each line", where)
	}
	return nil
}

// jsonTokenKind names what a JSON token is, for errors.
func jsonTokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// budget lets the decoder read at most inputMax bytes past where it is.
func (b *batchBody) budget() {
	if b.body != nil {
		b.body.stop = b.dec.InputOffset() + b.inputMax
	}
}

// tooLarge is the 413 of an input (or a batch field) over the input
// limit; field, when known, names the field whose value it was reading.
func (b *batchBody) tooLarge(where, field string) error {
	msg := fmt.Sprintf("%s is larger than %d bytes, the most a run's request may be (POST /v1/runs)", where, b.inputMax)
	if field != "" && !strings.HasPrefix(where, "field ") {
		msg = fmt.Sprintf("%s: field %q makes the input larger than %d bytes, the most a run's request may be (POST /v1/runs)", where, field, b.inputMax)
	}
	return &apiError{status: http.StatusRequestEntityTooLarge, code: "payload_too_large", msg: msg + "; put bulk data elsewhere and pass a reference"}
}

// errOverBudget is what a budgetReader returns past its budget.
var errOverBudget = errors.New("over the input budget")

// budgetReader reads r up to stop bytes from r's start: the decoder of a
// JSON batch holds at most one input's limit ahead of where it is.
type budgetReader struct {
	r       io.Reader
	n, stop int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.n >= b.stop {
		return 0, errOverBudget
	}
	if rem := b.stop - b.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// fieldAt names the field of a JSON object whose value prefix ends in:
// the last key read at the object's top level, or "".
func fieldAt(prefix []byte) string {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	depth, key, isKey := 0, "", false
	for {
		tok, err := dec.Token()
		if err != nil {
			return key
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
			isKey = depth == 1 // the object opened, or a value in it closed
			continue
		}
		if depth == 1 {
			if k, ok := tok.(string); ok && isKey {
				key = k
			}
			isKey = !isKey
		}
	}
}

func (b *batchBody) nextLine() (in wire.BatchInput, ok bool, err error) {
	for {
		raw, err := b.lines.ReadSlice('\n')
		long := errors.Is(err, bufio.ErrBufferFull)
		if long {
			// A line longer than the buffer: gather it, up to its limit.
			buf := append([]byte(nil), raw...)
			for errors.Is(err, bufio.ErrBufferFull) && int64(len(buf)) <= b.inputMax {
				raw, err = b.lines.ReadSlice('\n')
				buf = append(buf, raw...)
			}
			raw = buf
		}
		if err != nil && !errors.Is(err, io.EOF) {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return in, false, err
			}
			if int64(len(raw)) > b.inputMax {
				return in, false, b.tooLarge("line "+strconv.Itoa(b.at+1), fieldAt(raw))
			}
			return in, false, fmt.Errorf("read line %d: %w", b.at+1, err)
		}
		if len(raw) == 0 && err != nil {
			return in, false, nil
		}
		b.at++
		if int64(len(raw)) > b.inputMax {
			return in, false, b.tooLarge("line "+strconv.Itoa(b.at), fieldAt(raw))
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			if err != nil {
				return in, false, nil
			}
			continue // blank lines are skipped, and counted
		}
		if err := decodeInput(raw, &in, "line "+strconv.Itoa(b.at)); err != nil {
			return in, false, err
		}
		return in, true, nil
	}
}

// inputJSONError says what is wrong with one input's JSON.
func inputJSONError(err error) string {
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &ute) && ute.Field != "":
		return fmt.Sprintf("field %q must be %s, not %s", ute.Field, jsonKind(ute.Type.Kind()), ute.Value)
	case errors.As(err, &ute):
		return fmt.Sprintf("an input must be a JSON object, not %s", ute.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "malformed JSON: " + err.Error()
}

func (b *batchBody) line() int { return b.at }

// where names an input in errors: its line (JSONL) or position (JSON).
func (b *batchBody) where(line int) string {
	if b.jsonl {
		return "line " + strconv.Itoa(line)
	}
	return fmt.Sprintf("input %d (inputs[%d])", line, line-1)
}
