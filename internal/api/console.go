package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// What the console (internal/console) reads beyond the run endpoints,
// and what integrations want too: every event of the caller's tenant as
// one stream, and the list of tenants.

// handleEvents streams the caller's tenant's events, of every run, as
// Server-Sent Events in the order the events stream stored them. "id:"
// is the event's position in that stream: a client resumes with
// Last-Event-ID (or ?after=N) and gets every event after it, none lost,
// as long as the stream keeps them (AGENTFLEET_EVENTS_MAX_AGE; older ones
// are skipped). Without either it starts with the events published from
// now on, and its first block is an "id:" alone, the position it starts
// after, so a client that reconnects before any event came loses
// nothing either. ?after=0 starts with the oldest event kept. The admin
// token streams every tenant's events, or one tenant's with ?tenant=.
//
// An event published again after a crash (past the stream's duplicate
// window) comes again at a later position, with the same run_id and seq:
// a client drops what it has seen. The stream never ends by itself; a
// NATS failure ends it, and the client resumes.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, p principal) {
	tenant := p.tenant
	if p.admin {
		tenant = r.URL.Query().Get("tenant")
		if tenant != "" && !validID(tenant) {
			s.fail(w, r, errBadRequest("tenant %q is not a valid tenant id (letters, digits, '-' and '_', up to 64)", tenant))
			return
		}
	}
	after, fromNow, err := streamResumePoint(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	flusher, err := sseFlusher(w)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	es, err := s.cfg.Bus.TenantEvents(ctx, tenant, after, fromNow)
	if err != nil {
		s.log.Warn("subscribe to tenant events", "tenant", tenant, "err", err)
		s.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: "unavailable",
			msg: "the event stream is unavailable (NATS cannot be reached); try again shortly"})
		return
	}
	defer es.Close()

	startSSE(w, flusher)
	sse := &sseWriter{w: w, f: flusher}
	if err := sse.position(es.Start()); err != nil {
		return
	}
	for {
		// Next waits at most a keep-alive interval, so a quiet stream
		// still shows the client (and proxies) it is alive.
		nctx, cancel := context.WithTimeout(ctx, sseKeepAlive)
		ev, err := es.Next(nctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if sse.comment("keep-alive") != nil {
				return
			}
			continue
		case err != nil:
			s.log.Warn("tenant events ended", "tenant", tenant, "err", err)
			return
		}
		if sse.sendAt(strconv.FormatUint(ev.Pos, 10), ev.Event) != nil {
			return
		}
	}
}

// streamResumePoint is the stream position a client resumes after: the
// Last-Event-ID header, else ?after=; with neither, fromNow.
func streamResumePoint(r *http.Request) (after uint64, fromNow bool, err error) {
	name, v := lastEventID(r)
	if v == "" {
		return 0, true, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, errBadRequest("%s %q is not an event stream position: give the id of the last event received (0 for the oldest kept)", name, v)
	}
	return n, false, nil
}

// handleTenantList lists tenants with their budgets, newest first, for
// the admin token; a tenant's key lists its own tenant alone, which is
// how a console signed in with a key learns whose it is.
func (s *Server) handleTenantList(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	if !p.admin {
		view, err := s.TenantView(r.Context(), p.tenant)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, wire.TenantList{Tenants: []wire.TenantView{view}})
		return
	}
	params := store.TenantListParams{Cursor: q.Get("cursor")}
	var err error
	if params.Limit, err = pageLimit(q); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Store.TenantList(r.Context(), params)
	if errors.Is(err, store.ErrInvalid) {
		err = errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", params.Cursor)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.TenantList{Tenants: make([]wire.TenantView, 0, len(res.Tenants)), NextCursor: res.NextCursor}
	for _, t := range res.Tenants {
		view, err := s.viewTenant(r.Context(), t)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Tenants = append(out.Tenants, view)
	}
	writeJSON(w, http.StatusOK, out)
}

// position writes an "id:" alone: the client's Last-Event-ID becomes pos
// though no event came.
func (s *sseWriter) position(pos uint64) error {
	if _, err := fmt.Fprintf(s.w, "id: %d\n\n", pos); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}
