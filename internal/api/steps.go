package api

import (
	"net/http"
	"strconv"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// handleRunSteps serves a run's trace, journal included; ?turn=N narrows
// it to one turn (0: the run's message).
func (s *Server) handleRunSteps(w http.ResponseWriter, r *http.Request, p principal) {
	turn, narrow := 0, r.URL.Query().Has("turn")
	if narrow {
		v := r.URL.Query().Get("turn")
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.fail(w, r, errBadRequest("turn %q is not a turn number (0 is the run's message, 1 its first turn)", v))
			return
		}
		turn = n
	}
	run, err := s.lookupRun(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	steps, err := s.cfg.Store.StepListByRun(ctx, store.StepListByRunParams{RunID: run.ID, FromTurn: turn})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.RunSteps{RunID: run.ID, Steps: make([]agentfleet.Step, 0, len(steps)), Journal: []agentfleet.JournalEntry{}}
	for _, st := range steps {
		if !narrow || st.Turn == turn {
			out.Steps = append(out.Steps, st)
		}
	}
	if !narrow || turn > 0 {
		journal, err := s.cfg.Store.JournalListByRun(ctx, store.JournalListByRunParams{RunID: run.ID, Turn: turn})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Journal = append(out.Journal, journal...)
	}
	writeJSON(w, http.StatusOK, out)
}
