package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
)

// The journal (docs/ARCHITECTURE.md §4): a turn's side-effecting calls
// are numbered in the order the script makes them (every one, denied or
// not, with or without a journal, so that spawn() derives the same child
// ids either way), and, given ExecRequest.Journal, recorded with their
// outcome before the script sees it; a turn executed again gets the
// recorded outcomes back instead of calling again.

// journalRecordTimeout bounds a record made after the turn's context
// ended: the call was made, so its outcome is worth keeping.
const journalRecordTimeout = 10 * time.Second

// journalCall returns the journal entry of a call of pr with args, and
// whether pr's call is journaled at all: fetch and http other than GET
// and HEAD, ai, aiJSON and spawn.
func journalCall(req *agentfleet.ExecRequest, pr prim, args []byte, index int) (agentfleet.JournalEntry, bool) {
	e := agentfleet.JournalEntry{RunID: req.RunID, Turn: req.Turn, Index: index, Primitive: prims[pr].name}
	switch pr {
	case primFetch, primHTTP, primAPI:
		var a struct {
			Method string `json:"method"`
			URL    string `json:"url"`
		}
		if json.Unmarshal(args, &a) != nil {
			return e, false // refused as bad arguments, before anything is sent
		}
		e.Method = strings.ToUpper(a.Method)
		if e.Method == "" || e.Method == "GET" || e.Method == "HEAD" {
			return e, false
		}
		e.URL = a.URL
		if u, err := url.Parse(a.URL); err == nil {
			e.URL = u.Redacted()
		}
		return e, true
	case primAI, primAIJSON, primSpawn:
		return e, true
	}
	return e, false
}

// replay returns the outcome an earlier attempt recorded for call, if
// any. A failed lookup or a call that does not match the one recorded
// stops the journal for the rest of the turn (st.journalStop).
func replay(ctx context.Context, j agentfleet.Journal, call agentfleet.JournalEntry, st *hostState) (status byte, data []byte, ok bool) {
	if st.journalStop != nil {
		return journalStopped(st.journalStop)
	}
	rec, ok, err := j.Replay(ctx, call)
	if err != nil {
		st.journalStop = err
		return journalStopped(err)
	}
	if !ok {
		return 0, nil, false
	}
	st.usage = st.usage.Add(rec.Usage)
	if rec.Error != "" {
		return hostError, []byte(rec.Error), true
	}
	return hostOK, rec.Result, true
}

// record records call's outcome (status, data) and returns what the
// script gets: the outcome, or an error when it could not be recorded.
// A denial is not recorded (nothing was sent), nor an error of a turn
// that was stopped meanwhile (it is not the call's outcome).
func record(ctx context.Context, j agentfleet.Journal, call agentfleet.JournalEntry, status byte, data []byte, usage agentfleet.Usage, st *hostState) (byte, []byte) {
	if status == hostDenied || (status != hostOK && ctx.Err() != nil) {
		return status, data
	}
	call.Usage = usage
	if status == hostOK {
		call.Result = data
	} else {
		call.Error = string(data)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalRecordTimeout)
	defer cancel()
	if err := j.Record(rctx, call); err != nil {
		st.journalStop = err
		status, data, _ = journalStopped(err)
	}
	return status, data
}

// journalStopped is what a journaled call gets once the journal stopped.
func journalStopped(err error) (byte, []byte, bool) {
	var mm *agentfleet.JournalMismatchError
	if errors.As(err, &mm) {
		return hostError, []byte("journal: " + mm.Error()), true
	}
	return hostError, []byte("journal: this call's outcome could not be recorded, so the turn stops here and runs again later"), true
}

// journalFailure is the turn's outcome when its journal stopped: a
// mismatch fails the script whatever it caught; any other failure is the
// turn's error (the caller runs the turn again).
func journalFailure(res *agentfleet.ExecResult, stop error) error {
	if stop == nil {
		return nil
	}
	var mm *agentfleet.JournalMismatchError
	if errors.As(stop, &mm) {
		res.Answered, res.Answer, res.Return = false, nil, []byte("null")
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptException, Message: "journal: " + mm.Error()}
		return nil
	}
	return fmt.Errorf("journal: %w", stop)
}
