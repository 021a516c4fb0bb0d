package store_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// SessionHistory reads a session's ended runs before a run, oldest first,
// with their steps: not those that never ran, not other sessions' or
// later runs, and back to the newest run holding a summary step only.
func TestSessionHistory(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var s store.Store
			if backend == "postgres" {
				s = pgtest.Open(t)
			} else {
				s = openSQLite(t, filepath.Join(t.TempDir(), "store.db"))
			}
			sessionHistory(t, s)
		})
	}
}

func sessionHistory(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ten, err := s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	create := func(session, message string) agentfleet.Run {
		t.Helper()
		res, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: ten.ID, SessionID: session, Message: message})
		require.NoError(t, err)
		return res.Run
	}
	// ended runs a run of turns turns in session, the last ending with
	// status; extra steps go into the last turn.
	ended := func(session, message string, turns int, status agentfleet.RunStatus, extra ...agentfleet.Step) agentfleet.Run {
		t.Helper()
		r := create(session, message)
		_, err := s.RunTransition(ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusRunning})
		require.NoError(t, err)
		for turn := 1; turn <= turns; turn++ {
			p := store.TurnCommitParams{RunID: r.ID, Turn: turn, Status: agentfleet.StatusRunning,
				Args: json.RawMessage(`{"turn":` + string(rune('0'+turn)) + `}`),
				Steps: []agentfleet.Step{
					{Kind: agentfleet.StepModel, Content: message + " reply"},
					{Kind: agentfleet.StepObservation, Content: message + " observed"},
				}}
			if turn == turns {
				p.Status = status
				p.Steps = append(p.Steps, extra...)
				if status == agentfleet.StatusCompleted {
					p.Answer = json.RawMessage(`"` + message + ` answer"`)
				} else {
					p.Error = message + " failed"
				}
			}
			_, err := s.TurnCommit(ctx, p)
			require.NoError(t, err)
		}
		r, err = s.RunGetByID(ctx, store.RunGetByIDParams{ID: r.ID})
		require.NoError(t, err)
		return r
	}
	messages := func(rs []store.SessionRun) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Run.Message)
		}
		return out
	}

	a := ended("s", "a", 2, agentfleet.StatusCompleted)
	never := create("s", "never ran")
	_, err = s.RunCancel(ctx, store.RunCancelParams{ID: never.ID})
	require.NoError(t, err)
	ended("other", "elsewhere", 1, agentfleet.StatusCompleted)
	ended("", "no session", 1, agentfleet.StatusCompleted)
	c := ended("s", "c", 1, agentfleet.StatusFailed)
	current := create("s", "current")

	h, err := store.SessionHistory(ctx, s, store.SessionHistoryParams{Tenant: ten.ID, SessionID: "s", RunID: current.ID, Before: current.CreatedAt})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, messages(h), "ended runs that ran, of this session, oldest first")
	require.Equal(t, a.ID, h[0].Run.ID)
	require.JSONEq(t, `{"turn":2}`, string(h[0].Run.Args), "with their final carried value")
	require.JSONEq(t, `"a answer"`, string(h[0].Run.Answer))
	require.Len(t, h[0].Steps, 5, "and their steps: the task as turn 0, then two turns")
	require.Equal(t, "c failed", h[1].Run.Error)
	require.Equal(t, c.ID, h[1].Run.ID)

	h, err = store.SessionHistory(ctx, s, store.SessionHistoryParams{Tenant: ten.ID, SessionID: "s", RunID: current.ID, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, messages(h), "the newest within the limit")

	// A run created after the one asking is not its past.
	h, err = store.SessionHistory(ctx, s, store.SessionHistoryParams{Tenant: ten.ID, SessionID: "s", RunID: a.ID, Before: a.CreatedAt})
	require.NoError(t, err)
	require.Empty(t, h)

	// A summary step covers everything before it: reading stops at it.
	_, err = s.RunCancel(ctx, store.RunCancelParams{ID: current.ID})
	require.NoError(t, err)
	ended("s", "summarized", 1, agentfleet.StatusCompleted,
		agentfleet.Step{Kind: agentfleet.StepSummary, Content: "[summary of the session through turn 1]\nall of it"})
	ended("s", "after", 1, agentfleet.StatusCompleted)
	next := create("s", "next")
	h, err = store.SessionHistory(ctx, s, store.SessionHistoryParams{Tenant: ten.ID, SessionID: "s", RunID: next.ID, Before: next.CreatedAt})
	require.NoError(t, err)
	require.Equal(t, []string{"summarized", "after"}, messages(h))
	require.Equal(t, agentfleet.StepSummary, h[0].Steps[3].Kind)

	h, err = store.SessionHistory(ctx, s, store.SessionHistoryParams{Tenant: ten.ID, RunID: next.ID})
	require.NoError(t, err)
	require.Nil(t, h, "a run without a session reads nothing")
}
