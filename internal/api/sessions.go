package api

import (
	"errors"
	"net/http"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Sessions (docs/api.md, "Sessions"): the runs of one session id, read
// from them; a delete takes every run of the session once they have all
// ended. A tenant's key reads and deletes its own; the admin token any
// tenant's, named with ?tenant=.

func sessionView(x store.Session) wire.Session {
	return wire.Session{ID: x.ID, Agent: x.Agent, Runs: x.Runs, LastRunID: x.LastRunID, LastStatus: x.LastStatus,
		Tokens: x.Usage.Total(), CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt}
}

func (s *Server) handleSessionList(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	params := store.SessionListParams{Tenant: p.tenant, Agent: q.Get("agent"), Cursor: q.Get("cursor")}
	if params.Agent != "" && !validID(params.Agent) {
		s.fail(w, r, errUnprocessable("agent %q is not a valid name (letters, digits, '-' and '_', up to 64)", params.Agent))
		return
	}
	var err error
	if params.Limit, err = pageLimit(q); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Store.SessionList(r.Context(), params)
	if errors.Is(err, store.ErrInvalid) {
		// The rest was checked above: it is the cursor.
		err = errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page, with the same filters", params.Cursor)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.SessionList{Sessions: make([]wire.Session, 0, len(res.Sessions)), NextCursor: res.NextCursor}
	for _, x := range res.Sessions {
		out.Sessions = append(out.Sessions, sessionView(x))
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionID is the session named in the path; one no run could have is
// not found.
func sessionID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return "", errNotFound("no session %q", id)
	}
	return id, nil
}

func (s *Server) handleSessionGet(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := sessionID(r)
	if err == nil {
		var d store.SessionDetail
		d, err = s.cfg.Store.SessionGet(r.Context(), store.SessionGetParams{Tenant: p.tenant, ID: id})
		if err == nil {
			if d.RunList == nil {
				d.RunList = []agentfleet.Run{}
			}
			writeJSON(w, http.StatusOK, wire.SessionView{Session: sessionView(d.Session), Runs: d.RunList, Checkpoint: d.Checkpoint})
			return
		}
		if errors.Is(err, store.ErrNotFound) {
			err = errNotFound("no session %q", id)
		}
	}
	s.fail(w, r, err)
}

// handleSessionDelete deletes a session's runs with their traces; the
// usage ledger keeps what they were charged. While a run of it has not
// ended it is 409: cancel it first.
func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := sessionID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := s.cfg.Store.SessionDelete(r.Context(), store.SessionDeleteParams{Tenant: p.tenant, ID: id})
	switch {
	case errors.Is(err, store.ErrConflict):
		err = s.sessionActive(r, p.tenant, id)
	case errors.Is(err, store.ErrNotFound):
		err = errNotFound("no session %q", id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.cfg.RunsDeleted != nil {
		s.cfg.RunsDeleted.Add(float64(n))
	}
	writeJSON(w, http.StatusOK, wire.SessionDeleted{ID: id, Deleted: n})
}

// sessionActive is the 409 of a delete the store refused, naming a run
// of the session that has not ended.
func (s *Server) sessionActive(r *http.Request, tenant, id string) error {
	res, err := s.cfg.Store.RunList(r.Context(), store.RunListParams{Tenant: tenant, SessionID: id, Limit: 1, Oldest: true,
		Status: unfinishedStatuses})
	if err == nil && len(res.Runs) > 0 {
		run := res.Runs[0]
		return errConflict("session %s has run %s %s: a session is deleted once all its runs have ended; "+
			"cancel it (POST /v1/runs/%s/cancel) and delete the session once it has ended", id, run.ID, run.Status, run.ID)
	}
	return errConflict("session %s has a run that has not ended: cancel it, then delete the session once it has ended", id)
}

// unfinishedStatuses are the statuses of a run that has not ended.
var unfinishedStatuses = []agentfleet.RunStatus{agentfleet.StatusQueued, agentfleet.StatusRunning,
	agentfleet.StatusWaitingBudget, agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren}
