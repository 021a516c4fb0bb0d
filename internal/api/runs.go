package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Limits on submitted runs.
const (
	maxTurnsLimit  = 1000
	maxMessageLen  = 256 << 10
	maxMetadataLen = 64
	listLimitMax   = 500
)

func (s *Server) handleRunCreate(w http.ResponseWriter, r *http.Request, p principal) {
	var req wire.RunCreateRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	}
	params, err := validateRunCreate(p.tenant, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.CallbackURL != "" {
		if err := s.checkCallbackURL(req.CallbackURL); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	res, err := s.admit(r.Context(), params, admission{callbackURL: req.CallbackURL})
	if err != nil {
		s.fail(w, r, tooManyRuns(w, err))
		return
	}
	status := http.StatusAccepted
	if !res.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, res.Run)
}

// admission is what a run's admission carries besides the run: its
// queued event's Args, and a callback URL.
type admission struct {
	queuedArgs  json.RawMessage
	callbackURL string
}

// admit is the one path by which a run enters the fleet, for POST
// /v1/runs and the webhook intake alike: the agent must exist, the
// run's callback is stored first (so the run cannot end without it),
// the run is recorded with its queued event, then its events and first
// turn are published. An error is for fail (after tooManyRuns).
func (s *Server) admit(ctx context.Context, params store.RunCreateParams, a admission) (store.RunCreateResult, error) {
	if err := s.checkAgent(ctx, params.Tenant, params.Agent); err != nil {
		return store.RunCreateResult{}, err
	}
	if a.callbackURL != "" {
		if err := s.createCallback(ctx, &params, a.callbackURL); err != nil {
			return store.RunCreateResult{}, fmt.Errorf("store the run's callback: %w", err)
		}
	}
	params.Events = []agentfleet.Event{{
		V: agentfleet.EventVersion, Tenant: params.Tenant, SessionID: params.SessionID,
		Type: agentfleet.EventQueued, TS: time.Now().UTC(), Content: params.Message, Summary: "agent " + params.Agent,
		Args: a.queuedArgs,
	}}
	res, err := s.cfg.Store.RunCreate(ctx, params)
	if errors.Is(err, store.ErrUnknownAgent) {
		// Deleted since this server found it (checkAgent's cache).
		return res, errUnknownAgent(params.Agent)
	}
	if err != nil {
		return res, err
	}
	// A repeated submission (same idempotency key) publishes again what
	// the first one owed: if that request died between the store and
	// NATS, this finishes its work; if not, dedup drops the repeats.
	evs := res.Events
	if !res.Created {
		evs, err = s.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: res.Run.ID, Limit: 1})
		if err != nil {
			return res, err
		}
	}
	if err := s.outbox.Admitted(ctx, store.RunCreateResult{Run: res.Run, Events: evs, Startable: res.Startable}, s.cfg.Tracer.Admitted(ctx, res.Run)); err != nil {
		msg := fmt.Sprintf("run %s was recorded but could not be queued (%v); ", res.Run.ID, err)
		if within := s.requeueWithin(); within > 0 {
			msg += fmt.Sprintf("the dispatcher queues it once NATS is back (within about %s), or ", within)
		}
		msg += "submit it again with the same idempotency_key; submitting it again without one makes a second run"
		return res, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: msg}
	}
	return res, nil
}

// tooManyRuns turns a refusal for the tenant's max_queued_runs into a 429
// whose Retry-After says when to try again; other errors pass as they are.
func tooManyRuns(w http.ResponseWriter, err error) error {
	var full *store.QueueFullError
	if !errors.As(err, &full) {
		return err
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(full.RetryAfter.Seconds())))))
	return &apiError{status: http.StatusTooManyRequests, code: "too_many_runs", msg: full.Error()}
}

func validateRunCreate(tenant string, req wire.RunCreateRequest) (store.RunCreateParams, error) {
	p := store.RunCreateParams{
		Tenant: tenant, Agent: req.Agent, SessionID: req.SessionID, Message: req.Message,
		Context: req.Context, Metadata: req.Metadata, IdempotencyKey: req.IdempotencyKey,
		MaxTurns: req.MaxTurns, MaxTokens: req.MaxTokens,
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	switch {
	case strings.TrimSpace(req.Message) == "":
		return p, errUnprocessable("message is required: say what the agent should do")
	case len(req.Message) > maxMessageLen:
		return p, errUnprocessable("message is %d bytes; the limit is %d (put bulk data in context)", len(req.Message), maxMessageLen)
	case !validID(p.Agent):
		return p, errUnprocessable("agent %q is not a valid name (letters, digits, '-' and '_', up to 64)", p.Agent)
	case req.SessionID != "" && !validID(req.SessionID):
		return p, errUnprocessable("session_id %q is not valid (letters, digits, '-' and '_', up to 64)", req.SessionID)
	case len(req.IdempotencyKey) > 200:
		return p, errUnprocessable("idempotency_key is longer than 200 bytes")
	case req.MaxTurns < 0 || req.MaxTurns > maxTurnsLimit:
		return p, errUnprocessable("max_turns must be between 0 (agent default) and %d", maxTurnsLimit)
	case req.MaxTokens < 0:
		return p, errUnprocessable("max_tokens must not be negative (0 means no per-run cap)")
	case len(req.Metadata) > maxMetadataLen:
		return p, errUnprocessable("metadata has %d keys; the limit is %d", len(req.Metadata), maxMetadataLen)
	}
	if len(req.Context) > 0 && !json.Valid(req.Context) {
		return p, errBadRequest("context is not valid JSON")
	}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return p, errUnprocessable("timeout %q is not a positive duration like \"90s\" or \"10m\"", req.Timeout)
		}
		p.Deadline = time.Now().Add(d).UTC()
	}
	return p, nil
}

func (s *Server) handleRunGet(w http.ResponseWriter, r *http.Request, p principal) {
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.viewRun(r.Context(), run)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// lookupRun reads the run named in the path, as the principal may see it.
func (s *Server) lookupRun(r *http.Request, p principal) (agentfleet.Run, error) {
	id := r.PathValue("id")
	run, err := s.cfg.Store.RunGetByID(r.Context(), store.RunGetByIDParams{ID: id, Tenant: p.tenant})
	if errors.Is(err, store.ErrNotFound) {
		return run, errNotFound("no run %q", id)
	}
	return run, err
}

func (s *Server) handleRunList(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	params := store.RunListParams{Tenant: p.tenant, Agent: q.Get("agent"), SessionID: q.Get("session_id"),
		ParentRunID: q.Get("parent_run_id"), Cursor: q.Get("cursor")}
	if p.admin {
		params.Tenant = q.Get("tenant")
	}
	if st := q.Get("status"); st != "" {
		for _, v := range strings.Split(st, ",") {
			status := agentfleet.RunStatus(strings.TrimSpace(v))
			if !status.Valid() {
				s.fail(w, r, errBadRequest("unknown status %q", v))
				return
			}
			params.Status = append(params.Status, status)
		}
	}
	var err error
	if params.Limit, err = pageLimit(q); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Store.RunList(r.Context(), params)
	if errors.Is(err, store.ErrInvalid) {
		// Everything else was checked above: it is the cursor.
		err = errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page, with the same filters", params.Cursor)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Runs == nil {
		res.Runs = []agentfleet.Run{}
	}
	writeJSON(w, http.StatusOK, wire.RunList{Runs: res.Runs, NextCursor: res.NextCursor})
}

// pageLimit reads a list endpoint's ?limit= (zero when absent: the
// store's default page).
func pageLimit(q url.Values) (int, error) {
	l := q.Get("limit")
	if l == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > listLimitMax {
		return 0, errBadRequest("limit must be a number from 1 to %d", listLimitMax)
	}
	return n, nil
}

func (s *Server) handleRunCancel(w http.ResponseWriter, r *http.Request, p principal) {
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now().UTC()
	ev := func(t agentfleet.EventType, summary string) agentfleet.Event {
		return agentfleet.Event{V: agentfleet.EventVersion, RunID: run.ID, Tenant: run.Tenant, SessionID: run.SessionID,
			Turn: run.Turn, Type: t, TS: now, Summary: summary}
	}
	res, err := s.cfg.Store.RunCancel(r.Context(), store.RunCancelParams{
		ID: run.ID, Tenant: run.Tenant, Reason: "cancelled by request",
		Events: []agentfleet.Event{ev(agentfleet.EventCancelled, "cancelled before it ran further"), ev(agentfleet.EventDone, string(agentfleet.StatusCancelled))},
	})
	if errors.Is(err, store.ErrConflict) {
		// Name the status it ended with, which may be newer than the
		// one read above.
		if cur, gerr := s.cfg.Store.RunGetByID(r.Context(), store.RunGetByIDParams{ID: run.ID}); gerr == nil {
			run = cur
		}
		err = errConflict("run %s already ended (%s); only a queued, running or waiting run can be cancelled", run.ID, run.Status)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Immediate {
		s.cfg.Tracer.EndRun(r.Context(), res.Run)
	}
	// A publish that fails is the sweeps' to repeat (a family unsettled
	// the children sweep's, a session's next run the stranded sweep's).
	if err := s.outbox.Cancelled(context.WithoutCancel(r.Context()), res); err != nil {
		s.log.Warn("publish what a run's cancel owes", "run", run.ID, "err", err)
	}
	writeJSON(w, http.StatusAccepted, res.Run)
}

// handleRunDelete deletes an ended run with its trace (steps, events,
// model replies); the usage ledger keeps what it was charged. A run that
// has not ended is 409: cancel it first.
func (s *Server) handleRunDelete(w http.ResponseWriter, r *http.Request, p principal) {
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	err = s.cfg.Store.RunDelete(r.Context(), store.RunDeleteParams{ID: run.ID, Tenant: run.Tenant})
	switch {
	case errors.Is(err, store.ErrConflict):
		// The store saw it unfinished, so the status read above (which
		// can only have moved on to an end since) was unfinished too.
		err = errConflict("run %s is %s: only an ended run can be deleted; cancel it first (POST /v1/runs/%s/cancel) and delete it once it has ended",
			run.ID, run.Status, run.ID)
	case errors.Is(err, store.ErrNotFound):
		err = errNotFound("no run %q", run.ID) // deleted meanwhile
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.cfg.RunsDeleted != nil {
		s.cfg.RunsDeleted.Inc()
	}
	w.WriteHeader(http.StatusNoContent)
}
