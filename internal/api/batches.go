package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Batches (docs/api.md, "Batches"; docs/ARCHITECTURE.md §2): many runs
// submitted at once, one per input, their results read back in input
// order.
//
// POST /v1/batches reads its body as a stream, JSON or JSONL, each input
// held to the limits of POST /v1/runs, and admits the inputs in chunks
// bounded in count and bytes (store.BatchAdmission): the batch becomes visible
// whole when the last chunk commits, or not at all, so a malformed line
// at the end leaves nothing behind. Only then are the runs' queued events
// and first turns published, in bulk, a page at a time: the dispatcher
// never holds more than a page of the batch. A batch with max_concurrent
// has only that many runs released at first; each run's end releases the
// next (store.RunFamilySettle, and BatchSweep for what a crash missed).

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
		page, err := s.cfg.Store.BatchRunList(ctx, store.BatchRunListParams{ID: b.ID, AfterIndex: after, Limit: size.next()})
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
		page, err := s.cfg.Store.BatchRunList(ctx, store.BatchRunListParams{ID: b.ID, AfterIndex: after, Limit: size.next()})
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
		r.page, err = r.s.cfg.Store.BatchRunList(r.ctx, store.BatchRunListParams{ID: r.batch, AfterIndex: r.after, Limit: r.size.next(), Status: batchRetried})
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
