package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Batches (DESIGN §11): many runs submitted at once, one per input, their
// results read back in input order.
//
// POST /v1/batches reads its body as a stream, JSON or JSONL, each input
// held to the limits of POST /v1/runs, and admits the inputs in chunks
// bounded in count and bytes (store.BatchAdmission): the batch becomes visible
// whole when the last chunk commits, or not at all, so a malformed line
// at the end leaves nothing behind. Only then are the runs' queued events
// and first turns published, in bulk, a page at a time: the dispatcher
// never holds more than a page of the batch. A batch with max_concurrent
// has only that many runs released at first; each run's end releases the
// next (store.RunEnded, and BatchSweep for what a crash missed).

// Limits of a batch.
const (
	// BatchMaxBytesDefault is the body limit of POST /v1/batches
	// (AGENTFLEET_BATCH_MAX_BYTES).
	BatchMaxBytesDefault = 256 << 20
	batchInputsMax       = 100_000
	// batchChunk is how many inputs go to the store at once, and
	// batchPage the most runs read back at once (to publish them, or
	// for results); either holds about batchChunkBytes at most.
	batchChunk      = 1000
	batchChunkBytes = 4 << 20
	batchPage       = 2000
	// batchResultsPoll is how often ?wait=true looks for runs that ended.
	batchResultsPoll = 200 * time.Millisecond
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

// validateBatchInput checks an input as POST /v1/runs checks a run.
func validateBatchInput(in wire.BatchInput) error {
	_, err := validateRunCreate("", wire.RunCreateRequest{Message: in.Message, SessionID: in.SessionID, Context: in.Context,
		IdempotencyKey: in.IdempotencyKey, Metadata: in.Metadata})
	if err == nil && len(in.CustomID) > 200 {
		err = errUnprocessable("custom_id is longer than 200 bytes")
	}
	return err
}

// inputBytes is about what an input holds in memory.
func inputBytes(in wire.BatchInput) int {
	n := len(in.Message) + len(in.Context) + len(in.CustomID) + len(in.SessionID) + len(in.IdempotencyKey)
	for k, v := range in.Metadata {
		n += len(k) + len(v)
	}
	return n
}

// validateBatchSettings checks the batch-wide settings.
func (s *Server) validateBatchSettings(req wire.BatchCreateRequest) error {
	switch {
	case req.Agent != "" && !validID(req.Agent):
		return errUnprocessable("agent %q is not a valid name (letters, digits, '-' and '_', up to 64)", req.Agent)
	case len(req.IdempotencyKey) > 200:
		return errUnprocessable("idempotency_key is longer than 200 bytes")
	case req.MaxTurns < 0 || req.MaxTurns > maxTurnsLimit:
		return errUnprocessable("max_turns must be between 0 (agent default) and %d", maxTurnsLimit)
	case req.MaxTokens < 0:
		return errUnprocessable("max_tokens must not be negative (0 means no per-run cap)")
	case req.MaxConcurrent < 0:
		return errUnprocessable("max_concurrent must not be negative (0 means no cap)")
	case len(req.Metadata) > maxMetadataLen:
		return errUnprocessable("metadata has %d keys; the limit is %d", len(req.Metadata), maxMetadataLen)
	}
	if req.CallbackURL != "" {
		return s.checkCallbackURL(req.CallbackURL)
	}
	return nil
}

func (s *Server) handleBatchCreate(w http.ResponseWriter, r *http.Request, p principal) {
	body, err := newBatchBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if body.req.IdempotencyKey == "" {
		body.req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	}
	b, existed, err := s.admitBatch(r.Context(), p.tenant, &body.req, store.BatchAdmitParams{}, body)
	s.writeAdmitted(w, r, b, existed, err)
}

// writeAdmitted answers a batch's admission: 202 for a new batch, 200
// for the earlier one its idempotency key named.
func (s *Server) writeAdmitted(w http.ResponseWriter, r *http.Request, b store.Batch, existed bool, err error) {
	if err != nil {
		s.fail(w, r, tooManyRuns(w, err))
		return
	}
	status := http.StatusAccepted
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, batchView(b))
}

// batchSource yields a batch's inputs: next the next (ok false after
// the last), line the 1-based line (or position) of the last, where how
// errors name a line.
type batchSource interface {
	next() (in wire.BatchInput, ok bool, err error)
	line() int
	where(line int) string
}

// admitBatch admits a batch of tenant's with req's settings (read again
// after the inputs, for those that may follow them) and src's inputs,
// then publishes its runs. existed says the batch's idempotency key named an earlier batch,
// which is returned instead.
func (s *Server) admitBatch(ctx context.Context, tenant string, req *wire.BatchCreateRequest, extra store.BatchAdmitParams,
	src batchSource) (b store.Batch, existed bool, err error) {
	if err := s.validateBatchSettings(*req); err != nil {
		return b, false, err
	}
	agent := req.Agent
	if agent == "" {
		agent = agentfleet.DefaultAgent
	}
	if err := s.checkAgent(ctx, tenant, agent); err != nil {
		return b, false, err
	}
	extra.Tenant, extra.Agent, extra.MaxTurns, extra.MaxTokens = tenant, agent, req.MaxTurns, req.MaxTokens
	extra.MaxConcurrent, extra.Metadata, extra.CallbackURL = req.MaxConcurrent, req.Metadata, req.CallbackURL
	extra.IdempotencyKey = req.IdempotencyKey
	res, err := s.cfg.Store.BatchAdmit(ctx, extra)
	if err != nil {
		return b, false, err
	}
	if res.Existing != nil {
		return *res.Existing, true, nil
	}
	adm := res.Admission
	defer func() {
		if err != nil {
			if aerr := adm.Abort(context.WithoutCancel(ctx)); aerr != nil {
				s.log.Warn("abort a batch's admission", "batch", extra.ID, "err", aerr)
			}
		}
	}()
	chunk := make([]store.BatchInput, 0, batchChunk)
	lines := make([]int, 0, batchChunk) // the line of each input of chunk
	index, line, chunkBytes := 0, 0, 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := adm.Append(ctx, chunk)
		var ie *store.BatchInputError
		if errors.As(err, &ie) {
			at := src.where(lines[ie.Index-chunk[0].Index])
			if errors.Is(err, store.ErrConflict) {
				return errConflict("%s: %s", at, ie.Msg)
			}
			return errUnprocessable("%s: %s", at, ie.Msg)
		}
		clear(chunk) // drop the inputs' text before the next chunk is read
		chunk, lines, chunkBytes = chunk[:0], lines[:0], 0
		return err
	}
	for {
		in, ok, err := src.next()
		if err != nil {
			return b, false, err
		}
		if !ok {
			break
		}
		line = src.line()
		if err := validateBatchInput(in); err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				return b, false, &apiError{status: ae.status, code: ae.code, msg: src.where(line) + ": " + ae.msg}
			}
			return b, false, err
		}
		if index >= batchInputsMax {
			return b, false, errUnprocessable("%s: a batch has at most %d inputs; split it", src.where(line), batchInputsMax)
		}
		chunk = append(chunk, store.BatchInput{Index: index, CustomID: in.CustomID, Message: in.Message, Context: in.Context,
			Metadata: in.Metadata, SessionID: in.SessionID, IdempotencyKey: in.IdempotencyKey})
		lines = append(lines, line)
		index++
		chunkBytes += inputBytes(in)
		if len(chunk) == batchChunk || chunkBytes >= batchChunkBytes {
			if err := flush(); err != nil {
				return b, false, err
			}
		}
	}
	if err := flush(); err != nil {
		return b, false, err
	}
	if index == 0 {
		return b, false, errUnprocessable("the batch has no inputs: send at least one")
	}
	// Settings that followed the inputs in a JSON body.
	if err := s.validateBatchSettings(*req); err != nil {
		return b, false, err
	}
	b, err = adm.Commit(ctx, store.BatchCommitParams{MaxConcurrent: req.MaxConcurrent, Metadata: req.Metadata, CallbackURL: req.CallbackURL})
	if err != nil {
		return b, false, err
	}
	if err := s.publishBatch(ctx, b); err != nil {
		msg := fmt.Sprintf("batch %s was recorded but its runs could not all be queued (%v); ", b.ID, err)
		if within := s.requeueWithin(); within > 0 {
			msg += fmt.Sprintf("the dispatcher queues them once NATS is back (within about %s)", within)
		} else {
			msg += "the dispatcher's sweep queues them once NATS is back"
		}
		return b, false, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: msg}
	}
	return b, false, nil
}

// publishBatch publishes a committed batch's queued events and the first
// turns of its released runs, a page at a time.
func (s *Server) publishBatch(ctx context.Context, b store.Batch) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	var evs []agentfleet.Event
	var turns []bus.Turn
	var size pageSize
	for after := -1; after < b.Total-1; {
		page, err := s.cfg.Store.BatchRuns(ctx, store.BatchRunsParams{ID: b.ID, AfterIndex: after, Limit: size.next()})
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		size.fit(page)
		evs, turns = evs[:0], turns[:0]
		for _, br := range page {
			run := br.Run
			evs = append(evs, store.BatchQueuedEvent(run))
			if br.Index >= b.Released || run.Status != agentfleet.StatusQueued || run.Turn != 0 {
				continue
			}
			if run.SessionID != "" {
				next, err := store.SessionNext(ctx, s.cfg.Store, run.Tenant, run.SessionID)
				if err != nil {
					return err
				}
				if next == nil || next.ID != run.ID {
					continue // an earlier run of its session starts it
				}
			}
			turns = append(turns, bus.FirstTurn(run))
		}
		if err := s.cfg.Bus.PublishEventsBulk(ctx, evs); err != nil {
			return fmt.Errorf("publish queued events: %w", err)
		}
		if err := s.cfg.Bus.EnqueueTurns(ctx, turns); err != nil {
			return fmt.Errorf("enqueue first turns: %w", err)
		}
		after = page[len(page)-1].Index
		clear(evs) // the page's messages go before the next is read
	}
	return nil
}

// pageSize is how many of a batch's runs, with their inputs, the next
// page reads: it starts small and adapts so that a page holds about
// batchChunkBytes, whatever the inputs' sizes.
type pageSize struct{ n int }

func (p *pageSize) next() int {
	if p.n == 0 {
		p.n = 16
	}
	return p.n
}

// fit sizes the next page after page.
func (p *pageSize) fit(page []store.BatchRun) {
	held := 0
	for _, br := range page {
		r := br.Run
		held += len(r.Message) + len(r.Context) + len(r.Args) + len(r.Answer) + len(r.Error) + len(br.CustomID) + 256
	}
	p.n = min(batchPage, max(1, len(page)*batchChunkBytes/max(held, 1)))
}

func batchView(b store.Batch) wire.Batch {
	v := wire.Batch{ID: b.ID, Tenant: b.Tenant, Agent: b.Agent, Status: string(b.Status), Total: b.Total, MaxConcurrent: b.MaxConcurrent,
		Counts: b.Counts, Metadata: b.Metadata, RetryOf: b.RetryOf, CreatedAt: b.CreatedAt}
	if b.Counts != nil {
		u := b.Usage
		v.Usage = &u
	}
	if !b.FinishedAt.IsZero() {
		f := b.FinishedAt
		v.FinishedAt = &f
	}
	return v
}

// lookupBatch reads the batch named in the path, as the principal may
// see it, with its counts.
func (s *Server) lookupBatch(r *http.Request, p principal) (store.Batch, error) {
	id := r.PathValue("id")
	b, err := s.cfg.Store.BatchGetByID(r.Context(), store.BatchGetByIDParams{ID: id, Tenant: p.tenant})
	if errors.Is(err, store.ErrNotFound) {
		return b, errNotFound("no batch %q", id)
	}
	return b, err
}

func (s *Server) handleBatchGet(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := s.lookupBatch(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, batchView(b))
}

func (s *Server) handleBatchList(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	tenant := p.tenant
	if p.admin {
		tenant = q.Get("tenant")
		if tenant == "" {
			s.fail(w, r, errBadRequest("the admin lists one tenant's batches: pass ?tenant="))
			return
		}
	}
	limit, err := pageLimit(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Store.BatchList(r.Context(), store.BatchListParams{Tenant: tenant, Limit: limit, Cursor: q.Get("cursor")})
	if errors.Is(err, store.ErrInvalid) {
		err = errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", q.Get("cursor"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.BatchList{Batches: make([]wire.Batch, len(res.Batches)), NextCursor: res.NextCursor}
	for i, b := range res.Batches {
		out.Batches[i] = batchView(b)
	}
	writeJSON(w, http.StatusOK, out)
}

func batchResult(br store.BatchRun) wire.BatchResult {
	r := br.Run
	return wire.BatchResult{Index: br.Index, CustomID: br.CustomID, RunID: r.ID, Status: r.Status, Answer: r.Answer, Error: r.Error,
		Usage: r.Usage, Metadata: r.Metadata}
}

// handleBatchResults writes one JSON line per input, in input order, from
// ?after=INDEX on. With ?wait=true it holds the response open and writes
// each line once its run has ended, in order, until the last.
func (s *Server) handleBatchResults(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := s.lookupBatch(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	after := -1
	if v := q.Get("after"); v != "" {
		if after, err = strconv.Atoi(v); err != nil || after < -1 {
			s.fail(w, r, errBadRequest("after=%q must be an input's index (0-based), or -1", v))
			return
		}
	}
	wait := false
	if v := q.Get("wait"); v != "" {
		if wait, err = strconv.ParseBool(v); err != nil {
			s.fail(w, r, errBadRequest("wait=%q must be true or false", v))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	ctx := r.Context()
	var size pageSize
	for after < b.Total-1 {
		page, err := s.cfg.Store.BatchRuns(ctx, store.BatchRunsParams{ID: b.ID, AfterIndex: after, Limit: size.next()})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read batch results", "batch", b.ID, "err", err)
			}
			return
		}
		size.fit(page)
		wrote := 0
		for _, br := range page {
			if wait && !br.Run.Status.Terminal() {
				break
			}
			if err := enc.Encode(batchResult(br)); err != nil {
				return
			}
			after, wrote = br.Index, wrote+1
		}
		if len(page) == 0 {
			return // runs deleted by retention
		}
		if wrote < len(page) {
			if flusher != nil {
				flusher.Flush()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(batchResultsPoll):
			}
		}
	}
}

func (s *Server) handleBatchCancel(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := s.lookupBatch(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	for {
		res, err := s.cfg.Store.BatchCancel(ctx, store.BatchCancelParams{ID: b.ID, Tenant: b.Tenant})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.publishBatchCancel(ctx, res)
		if !res.More {
			break
		}
	}
	if b, err = s.lookupBatch(r, p); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, batchView(b))
}

// publishBatchCancel publishes what one chunk of a batch's cancel
// owes (outbox.BatchCancelled); the sweeps repeat what fails.
func (s *Server) publishBatchCancel(ctx context.Context, res store.BatchCancelResult) {
	ctx = context.WithoutCancel(ctx) // a family to settle is owed whether the client waits or not
	for _, c := range res.Cancelled {
		if c.Run.Children > 0 {
			s.cfg.Tracer.EndRun(ctx, c.Run)
		}
	}
	if err := s.outbox.BatchCancelled(ctx, res); err != nil {
		s.log.Warn("publish what a batch's cancel owes", "batch", res.Batch.ID, "err", err)
	}
}

// batchRetried are the statuses whose inputs retry submits again.
var batchRetried = []agentfleet.RunStatus{agentfleet.StatusFailed, agentfleet.StatusMaxTurns}

// handleBatchRetry submits the failed inputs (failed or out of turns) of a
// batch again as a new batch with the same settings, their custom_id and
// metadata kept. Retrying the same batch twice returns the first retry
// (its idempotency key is "retry/<batch>" unless one is given).
func (s *Server) handleBatchRetry(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := s.lookupBatch(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	failed := b.Counts[agentfleet.StatusFailed] + b.Counts[agentfleet.StatusMaxTurns]
	if failed == 0 {
		s.fail(w, r, errConflict("batch %s has no failed inputs to retry", b.ID))
		return
	}
	req := wire.BatchCreateRequest{Agent: b.Agent, IdempotencyKey: r.Header.Get("Idempotency-Key"), MaxTurns: b.MaxTurns,
		MaxTokens: b.MaxTokens, MaxConcurrent: b.MaxConcurrent, Metadata: b.Metadata, CallbackURL: b.CallbackURL}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = "retry/" + b.ID
	}
	src := &retrySource{s: s, ctx: r.Context(), batch: b.ID, after: -1}
	nb, existed, err := s.admitBatch(r.Context(), b.Tenant, &req, store.BatchAdmitParams{RetryOf: b.ID}, src)
	s.writeAdmitted(w, r, nb, existed, err)
}

// retrySource yields a batch's failed inputs, a page at a time.
type retrySource struct {
	s     *Server
	ctx   context.Context
	batch string
	page  []store.BatchRun
	size  pageSize
	after int
	n     int
}

func (r *retrySource) next() (wire.BatchInput, bool, error) {
	if len(r.page) == 0 {
		var err error
		r.page, err = r.s.cfg.Store.BatchRuns(r.ctx, store.BatchRunsParams{ID: r.batch, AfterIndex: r.after, Limit: r.size.next(), Status: batchRetried})
		if err != nil || len(r.page) == 0 {
			return wire.BatchInput{}, false, err
		}
		r.size.fit(r.page)
		r.after = r.page[len(r.page)-1].Index
	}
	br := r.page[0]
	r.page, r.n = r.page[1:], r.n+1
	return wire.BatchInput{CustomID: br.CustomID, Message: br.Run.Message, Context: br.Run.Context, Metadata: br.Run.Metadata,
		SessionID: br.Run.SessionID}, true, nil
}

func (r *retrySource) line() int { return r.n }

func (r *retrySource) where(line int) string {
	return fmt.Sprintf("failed input %d of batch %s", line, r.batch)
}
