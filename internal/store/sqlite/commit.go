package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// commitRunSQL advances a run past a turn, fenced in its WHERE: the run
// must have committed exactly turn-1 turns and be in one of the statuses
// ?12 lists (rules.CommitFrom: those that may move to the new status). A commit
// without Args or Answer keeps the stored ones: a failed turn carries the
// previous args on. A cancellation without an error takes the requested
// cancel's reason.
// A commit that parks its run for its children (waiting_children) leaves
// it running instead when every child it waits for (?14) has ended.
var commitRunSQL = `UPDATE runs SET turn = ?1,
		status = CASE WHEN ?2 = 'waiting_children' AND NOT EXISTS (
				SELECT 1 FROM json_each(?14) w JOIN runs k ON k.id = w.value WHERE k.status NOT IN (` + rules.TerminalSQL + `))
			THEN 'running' ELSE ?2 END,
		args = COALESCE(?3, args), answer = COALESCE(?4, answer),
		error = CASE WHEN ?5 <> '' THEN ?5 WHEN ?2 = 'cancelled' AND error = '' THEN cancel_reason ELSE error END,
		prompt_tokens = prompt_tokens + ?6, completion_tokens = completion_tokens + ?7,
		data_bytes_carried = data_bytes_carried + ?8, event_seq = event_seq + ?9, updated_at = ?10,
		children = children + ?13, wait_ids = ?14, wait_until = ?15
	WHERE id = ?11 AND turn = ?1 - 1 AND instr(?12, ',' || status || ',') > 0 RETURNING ` + rules.RunCols

// Steps and events go in with multi-row INSERTs of at most insertChunk
// rows (11 parameters a row at most: far below SQLite's variable limit).
// Each row count has its own statement text, so the writer's statement
// cache holds at most insertChunk of each.
const insertChunk = 64

const (
	insertStepHead  = `INSERT INTO steps (run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at) VALUES `
	insertEventHead = `INSERT INTO events (run_id, seq, v, turn, type, ts, content, args, tokens_prompt, tokens_completion, summary) VALUES `
)

var (
	insertStepSQL  = multiRowSQL(insertStepHead, 9)
	insertEventSQL = multiRowSQL(insertEventHead, 11)
)

// multiRowSQL returns the INSERT statements of 1 to insertChunk rows of
// cols columns, indexed by row count.
func multiRowSQL(head string, cols int) []string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	out := make([]string, insertChunk+1)
	for n := 1; n <= insertChunk; n++ {
		out[n] = head + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
	}
	return out
}

// insertRows inserts n rows in chunks; add appends row i's values.
func insertRows(ctx context.Context, tx *wtx, sqls []string, cols, n int, add func(args []any, i int) []any) error {
	args := make([]any, 0, cols*min(n, insertChunk))
	for from := 0; from < n; from += insertChunk {
		k := min(n-from, insertChunk)
		args = args[:0]
		for i := from; i < from+k; i++ {
			args = add(args, i)
		}
		if _, err := tx.ExecContext(ctx, sqls[k], args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) insertSteps(ctx context.Context, tx *wtx, steps []agentfleet.Step) error {
	err := insertRows(ctx, tx, insertStepSQL, 9, len(steps), func(args []any, i int) []any {
		x := steps[i]
		return append(args, x.RunID, x.Turn, x.Index, string(x.Kind), x.Content, x.Model,
			x.Usage.PromptTokens, x.Usage.CompletionTokens, x.CreatedAt.UnixMicro())
	})
	if err != nil {
		return fmt.Errorf("insert %d steps: %w", len(steps), err)
	}
	return nil
}

func (s *Store) insertEvents(ctx context.Context, tx *wtx, evs []agentfleet.Event) error {
	err := insertRows(ctx, tx, insertEventSQL, 11, len(evs), func(args []any, i int) []any {
		e := evs[i]
		var tp, tc any
		if e.Tokens != nil {
			tp, tc = e.Tokens.Prompt, e.Tokens.Completion
		}
		return append(args, e.RunID, e.Seq, e.V, e.Turn, string(e.Type), e.TS.UnixMicro(), e.Content,
			blobArg(e.Args), tp, tc, e.Summary)
	})
	if err != nil {
		return fmt.Errorf("insert %d events: %w", len(evs), err)
	}
	return nil
}

// TurnCommitApply applies the set in one write transaction. Each commit
// is one fenced UPDATE of its run (a loser changes nothing); the winners'
// steps and events are inserted after all the updates, as few multi-row
// INSERTs as the set allows, and then the heads of the sessions they
// ended are read.
func (d liteDriver) TurnCommitApply(ctx context.Context, ps []store.TurnCommitParams, now time.Time) ([]driver.TurnApplied, error) {
	nSteps, nEvents := 0, 0
	for _, p := range ps {
		nSteps += len(p.Steps)
		nEvents += len(p.Events)
	}
	out := make([]driver.TurnApplied, len(ps))
	steps := make([]agentfleet.Step, 0, nSteps)
	evs := make([]agentfleet.Event, 0, nEvents)
	err := d.s.write(ctx, func(tx *wtx) error {
		clear(out)
		steps, evs = steps[:0], evs[:0]
		commitStmt, err := tx.stmts.stmt(tx.ctx(ctx), commitRunSQL)
		if err != nil {
			return err
		}
		for i, p := range ps {
			n := len(p.Events)
			row, err := scans.Run(commitStmt.QueryRowContext(ctx, p.Turn, string(p.Status), blobArg(p.Args), blobArg(p.Answer), p.Error,
				p.Usage.PromptTokens, p.Usage.CompletionTokens, p.DataBytesCarried, n, now.UnixMicro(), p.RunID, rules.CommitFrom[p.Status],
				p.Spawned, textArg(rules.EncodeStrings(p.WaitIDs)), tsArg(p.WaitUntil)))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("commit turn %d of run %s: %w", p.Turn, p.RunID, err)
			}
			out[i] = driver.TurnApplied{Applied: true, Run: row, LastSeq: row.EventSeq - int64(n)}
			steps = append(steps, p.Steps...)
			rules.Number(p.Events, row.Run, out[i].LastSeq)
			evs = append(evs, p.Events...)
		}
		if err := d.s.insertSteps(ctx, tx, steps); err != nil {
			return err
		}
		if err := d.s.insertEvents(ctx, tx, evs); err != nil {
			return err
		}
		return sessionHeads(ctx, tx, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sessionHeads sets the Head of every applied commit that ended a run of a
// session, one read per session.
func sessionHeads(ctx context.Context, tx *wtx, out []driver.TurnApplied) error {
	heads := map[[2]string]*driver.RunRow{}
	for i := range out {
		r := out[i].Run
		if !out[i].Applied || !r.Status.Terminal() || r.SessionID == "" {
			continue
		}
		k := [2]string{r.Tenant, r.SessionID}
		h, ok := heads[k]
		if !ok {
			var err error
			if h, err = sessionHead(ctx, tx, r.Tenant, r.SessionID); err != nil {
				return err
			}
			heads[k] = h
		}
		out[i].Head = h
	}
	return nil
}

// TurnCommitRunsGet reads on the read pool, after the commit's write.
func (d liteDriver) TurnCommitRunsGet(ctx context.Context, ids []string) ([]driver.RunRow, error) {
	return all(ctx, d.exec, `SELECT `+rules.RunCols+` FROM runs WHERE id IN (SELECT value FROM json_each(?))`, scans.RunRow,
		string(rules.EncodeStrings(ids)))
}
