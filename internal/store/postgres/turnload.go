package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// turnLoadSQL reads a run for the execution of turn $2 and starts it when
// it is queued for that turn (turn $2-1 committed), no cancel requested. The
// status is concatenated with an empty string so that no index can serve
// the test: the row is found by its key, and a plan made while runs was
// nearly empty chose the status index instead, then walked every queued
// run to start one.
var turnLoadSQL = `WITH s AS (
		UPDATE runs SET status = 'running', updated_at = $3
		WHERE id = $1 AND status || '' = 'queued' AND turn = $2 - 1 AND NOT cancel_requested
		RETURNING ` + rules.RunCols + `
	), r AS (
		SELECT true AS started, ` + rules.RunCols + ` FROM s
		UNION ALL
		SELECT false, ` + rules.RunCols + ` FROM runs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM s)
	)
	` + turnLoadResultSQL

// turnLoadManySQL is turnLoadSQL for the runs $1 at the turns $2 (the
// same order): one row per run found, in no particular order.
var turnLoadManySQL = `WITH p AS (
		SELECT * FROM unnest($1::text[], $2::int[]) AS p(p_id, p_turn)
	), s AS (
		UPDATE runs SET status = 'running', updated_at = $3
		FROM p
		WHERE runs.id = p.p_id AND runs.status || '' = 'queued' AND runs.turn = p.p_turn - 1 AND NOT runs.cancel_requested
		RETURNING ` + rules.PrefixCols("runs.", rules.RunCols) + `
	), r AS (
		SELECT true AS started, ` + rules.RunCols + ` FROM s
		UNION ALL
		SELECT false, ` + rules.PrefixCols("runs.", rules.RunCols) + ` FROM runs JOIN p ON runs.id = p.p_id
		WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = runs.id)
	)
	` + turnLoadResultSQL

// turnLoadResultSQL ends both turn load statements: from r (each run,
// and whether this statement started it), the columns scanRun reads after
// started, whether the run's tenant is unlimited and its skills revision.
const turnLoadResultSQL = `SELECT r.started,
		COALESCE((SELECT t.token_limit = 0 AND t.tokens_per_minute = 0 FROM tenants t WHERE t.id = r.tenant), false),
		COALESCE((SELECT v.revision FROM skill_revisions v WHERE v.tenant = r.tenant), 0),
		` + rules.RunCols + ` FROM r`

// stepsManySQL is rules.StepsSQL for several runs: the steps of run $1[i] of
// turns [$2[i], $3[i]), by run, turn and index.
const stepsManySQL = `SELECT ` + rules.StepCols + ` FROM steps
	JOIN unnest($1::text[], $2::int[], $3::int[]) AS p(p_id, p_from, p_to)
		ON steps.run_id = p.p_id AND steps.turn >= p.p_from AND steps.turn < p.p_to
	ORDER BY run_id, turn, idx`

// RunLoad is one round trip, shared with other calls in flight, and
// with other turn loads one statement for the runs and one for their
// histories: the run (started if due) and the history the turn will need
// if the run stands where the message says. Steps of the turn itself or
// later are never read, so a commit landing between the two statements
// cannot add to the history.
func (d pgDriver) RunLoad(ctx context.Context, p store.TurnLoadParams, now time.Time) (store.TurnLoadResult, error) {
	c := &turnLoadCall{p: p, now: now}
	err := d.s.pipelinedMerge(ctx, pipeOrderRun+p.RunID, c.queue, c.read, &turnLoadMerger, c)
	return c.res, err
}

// turnLoadCall is one RunLoad in a pipeline.
type turnLoadCall struct {
	p   store.TurnLoadParams
	now time.Time
	res store.TurnLoadResult
}

func (c *turnLoadCall) queue(b *pgx.Batch) {
	b.Queue(turnLoadSQL, c.p.RunID, c.p.Turn, c.now)
	if c.p.Turn > 1 {
		b.Queue(rules.StepsSQL, c.p.RunID, c.p.HistoryFrom, c.p.Turn)
	}
}

func (c *turnLoadCall) read(br pgx.BatchResults) error {
	c.res = store.TurnLoadResult{}
	row, err := scans.Run(br.QueryRow(), &c.res.Started, &c.res.TenantUnlimited, &c.res.SkillsRevision)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("run %s: %w", c.p.RunID, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	c.res.Run = row.Run
	if c.p.Turn == 1 {
		return nil
	}
	c.res.Steps, err = collectBatch(br, scans.Step)
	c.res.HistoryLoaded = err == nil
	return err
}

// turnLoadMerger runs the turn loads of a pipeline as two statements: the
// runs (turnLoadManySQL) and the histories of the runs past turn 1
// (stepsManySQL). Of two loads of one run only the first is merged: only
// one of them may start it.
var turnLoadMerger = pipeMerger{
	key: func(c *pipeCall) string { return c.arg.(*turnLoadCall).p.RunID },
	queue: func(b *pgx.Batch, calls []*pipeCall) {
		ids, turns := make([]string, len(calls)), make([]int32, len(calls))
		var hIDs []string
		var hFrom, hTo []int32
		for i, pc := range calls {
			c := pc.arg.(*turnLoadCall)
			ids[i], turns[i] = c.p.RunID, int32(c.p.Turn)
			if c.p.Turn > 1 {
				hIDs = append(hIDs, c.p.RunID)
				hFrom = append(hFrom, int32(c.p.HistoryFrom))
				hTo = append(hTo, int32(c.p.Turn))
			}
		}
		// Key lookups, planned once per connection (see keyPlansSQL).
		b.Queue(keyPlansSQL)
		b.Queue(turnLoadManySQL, ids, turns, calls[0].arg.(*turnLoadCall).now)
		if len(hIDs) > 0 {
			b.Queue(stepsManySQL, hIDs, hFrom, hTo)
		}
	},
	read: func(br pgx.BatchResults, calls []*pipeCall) error {
		byID := make(map[string]*turnLoadCall, len(calls))
		history := false
		for _, pc := range calls {
			c := pc.arg.(*turnLoadCall)
			c.res = store.TurnLoadResult{}
			byID[c.p.RunID] = c
			history = history || c.p.Turn > 1
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		found := 0
		for rows.Next() {
			var res store.TurnLoadResult
			row, err := scans.Run(rows, &res.Started, &res.TenantUnlimited, &res.SkillsRevision)
			if err != nil {
				rows.Close()
				return err
			}
			c := byID[row.ID]
			if c == nil {
				rows.Close()
				return fmt.Errorf("turn loads: run %s was not asked for", row.ID)
			}
			res.Run = row.Run
			c.res = res
			found++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if found != len(calls) {
			// A run is missing: each load runs alone and reports its own.
			return fmt.Errorf("turn loads: %d of %d runs: %w", found, len(calls), store.ErrNotFound)
		}
		if !history {
			return nil
		}
		steps, err := collectBatch(br, scans.Step)
		if err != nil {
			return err
		}
		for _, c := range byID {
			c.res.HistoryLoaded = c.p.Turn > 1
		}
		// Sorted by run, then turn and index: each run's steps are one
		// stretch.
		for i := 0; i < len(steps); {
			j := i + 1
			for j < len(steps) && steps[j].RunID == steps[i].RunID {
				j++
			}
			if c := byID[steps[i].RunID]; c != nil && c.p.Turn > 1 {
				c.res.Steps = steps[i:j:j]
			}
			i = j
		}
		return nil
	},
}
