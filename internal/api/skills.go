package api

import (
	"errors"
	"net/http"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/skills"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Skills (docs/api.md, "Skills"; DESIGN.md section 20): a tenant's named
// recipes, which the prompt of a run lists by relevance to its task and
// its scripts read with skillGet(). A tenant's key with the admin scope
// manages its own; the admin token any tenant's, named with ?tenant=.
// POST /v1/runs/{id}/skill compiles a completed run into one.

// skillMaxBodyBytes lets a body just past the 64 KiB limit reach the
// check that says so, rather than a bare 413.
const skillMaxBodyBytes = 2*agentfleet.SkillBodyMaxBytes + 16<<10

func (s *Server) handleSkillPut(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if err := agentfleet.CheckSkillName(name); err != nil {
		s.fail(w, r, errUnprocessable("%v", err))
		return
	}
	var req wire.SkillRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if len(req.Body) > agentfleet.SkillBodyMaxBytes {
		s.fail(w, r, errUnprocessable("body is %d bytes; a skill's body is at most %d (64 KiB): split it into several skills", len(req.Body), agentfleet.SkillBodyMaxBytes))
		return
	}
	sk, err := s.cfg.Store.SkillPut(r.Context(), store.SkillPutParams{Tenant: p.tenant, Name: name,
		Description: req.Description, Body: req.Body, Agents: req.Agents, Source: agentfleet.SkillSourceImported})
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no tenant %q", p.tenant)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if sk.CreatedAt.Equal(sk.UpdatedAt) {
		status = http.StatusCreated
	}
	writeJSON(w, status, sk)
}

// handleSkillList lists the tenant's skills by name, without bodies, a
// page at a time: the cursor is the last name of the previous page.
func (s *Server) handleSkillList(w http.ResponseWriter, r *http.Request, p principal) {
	limit, err := pageLimit(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if limit == 0 {
		limit = listLimitMax
	}
	cursor := r.URL.Query().Get("cursor")
	if cursor != "" && agentfleet.CheckSkillName(cursor) != nil {
		s.fail(w, r, errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", cursor))
		return
	}
	all, err := s.cfg.Store.SkillList(r.Context(), p.tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.SkillList{Skills: []agentfleet.Skill{}}
	for _, sk := range all {
		if sk.Name <= cursor {
			continue
		}
		if len(out.Skills) == limit {
			out.NextCursor = out.Skills[limit-1].Name
			break
		}
		sk.Body = ""
		out.Skills = append(out.Skills, sk)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleSkillGet(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	sk, err := s.cfg.Store.SkillGet(r.Context(), p.tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no skill %q", name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sk)
}

func (s *Server) handleSkillDelete(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := s.cfg.Store.SkillDelete(r.Context(), p.tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no skill %q", name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleRunSkill compiles a completed run into a skill of its tenant:
// the description from its task, the recipe from its turns' scripts and
// what they observed (skills.Compile). 409 for a run not completed.
func (s *Server) handleRunSkill(w http.ResponseWriter, r *http.Request, p principal) {
	var req wire.SkillCompileRequest
	if err := decodeBody(r, &req); err != nil && r.ContentLength != 0 {
		s.fail(w, r, err)
		return
	}
	if req.Name != "" {
		if err := agentfleet.CheckSkillName(req.Name); err != nil {
			s.fail(w, r, errUnprocessable("%v", err))
			return
		}
	}
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if run.Status != agentfleet.StatusCompleted {
		s.fail(w, r, errConflict("run %s is %s: only a completed run compiles into a skill", run.ID, run.Status))
		return
	}
	steps, err := s.cfg.Store.StepListByRun(r.Context(), store.StepListByRunParams{RunID: run.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c := skills.Compile(run, steps)
	if req.Name != "" {
		c.Name = req.Name
	}
	sk, err := s.cfg.Store.SkillPut(r.Context(), store.SkillPutParams{Tenant: run.Tenant, Name: c.Name,
		Description: c.Description, Body: c.Body, Agents: req.Agents, Source: agentfleet.SkillSourceCompiled, SourceRun: run.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if sk.CreatedAt.Equal(sk.UpdatedAt) {
		status = http.StatusCreated
	}
	writeJSON(w, status, sk)
}
