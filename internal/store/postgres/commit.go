package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// commitSQL commits a set of turns of distinct runs in one statement. The
// UPDATE is the fence: only a run that has committed exactly turn-1
// turns, and whose status may move to the new one, is updated, and only
// the updated runs' steps and events are inserted (they join on u). A
// commit without args or answer keeps the stored ones (a failed turn
// carrieds the previous args on); a cancellation without an error takes
// the requested cancel's reason. A commit that parks its run for its
// children (waiting_children) leaves it running instead when every child
// it waits for has ended already: a child that ends later wakes it
// (RunFamilySettle), and one that ended before found it not waiting yet.
//
// c: $1 run_id, $2 turn, $3 status, $4 args, $5 answer, $6 error,
// $7 prompt, $8 completion, $9 carried, $10 n_events, $32 spawned,
// $33 wait ids (a JSON array, ” for none), $34 wait until (unix
// microseconds, 0 for none); $11 now, $12 legal "from>to" pairs; steps
// $13..$20; events $21..$31.
var commitSQL = `WITH c AS (
		SELECT * FROM unnest($1::text[], $2::integer[], $3::text[], $4::bytea[], $5::bytea[], $6::text[],
			$7::bigint[], $8::bigint[], $9::bigint[], $10::integer[], $32::integer[], $33::text[], $34::bigint[])
		WITH ORDINALITY AS c(run_id, turn, status, args, answer, error, prompt, completion, carried, n_events,
			spawned, wait_ids, wait_until_us, ord)
	), u AS (
		UPDATE runs r SET
			turn = c.turn,
			status = CASE WHEN c.status = 'waiting_children' AND NOT EXISTS (
					SELECT 1 FROM jsonb_array_elements_text(NULLIF(c.wait_ids, '')::jsonb) w(id)
					JOIN runs k ON k.id = w.id WHERE k.status NOT IN (` + rules.TerminalSQL + `))
				THEN 'running' ELSE c.status END,
			children = r.children + c.spawned,
			wait_ids = NULLIF(c.wait_ids, '')::jsonb,
			wait_until = CASE WHEN c.wait_until_us = 0 THEN NULL
				ELSE timestamptz 'epoch' + c.wait_until_us * interval '1 microsecond' END,
			args = COALESCE(c.args, r.args),
			answer = COALESCE(c.answer, r.answer),
			error = CASE WHEN c.error <> '' THEN c.error
				WHEN c.status = 'cancelled' AND r.error = '' THEN r.cancel_reason ELSE r.error END,
			prompt_tokens = r.prompt_tokens + c.prompt,
			completion_tokens = r.completion_tokens + c.completion,
			data_bytes_carried = r.data_bytes_carried + c.carried,
			event_seq = r.event_seq + c.n_events,
			updated_at = $11
		FROM c
		WHERE r.id = c.run_id AND r.turn = c.turn - 1 AND (r.status || '>' || c.status) = ANY($12::text[])
		RETURNING c.ord, r.event_seq - c.n_events AS last_seq, ` + rules.PrefixCols("r.", rules.RunCols) + `
	), s AS (
		INSERT INTO steps (run_id, turn, idx, kind, content, model, prompt_tokens, completion_tokens, created_at)
		SELECT u.id, u.turn, x.idx, x.kind, x.content, x.model, x.prompt, x.completion, x.created_at
		FROM unnest($13::bigint[], $14::integer[], $15::text[], $16::text[], $17::text[], $18::bigint[], $19::bigint[], $20::timestamptz[])
			AS x(ord, idx, kind, content, model, prompt, completion, created_at)
		JOIN u ON u.ord = x.ord
	), e AS (
		` + insertEventsInto + `
		SELECT u.id, u.last_seq + x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
		FROM unnest($21::bigint[], $22::bigint[], $23::smallint[], $24::integer[], $25::text[], $26::timestamptz[],
			$27::text[], $28::bytea[], $29::bigint[], $30::bigint[], $31::text[])
			AS x(ord, k, v, turn, type, ts, content, args, tp, tc, summary)
		JOIN u ON u.ord = x.ord
	)
	SELECT ord, last_seq, ` + rules.RunCols + ` FROM u`

// keyPlansSQL tells the planner, for the rest of a transaction, to find
// rows by key and to plan each statement once. Every statement of a
// commit batch (and of merged turn loads) finds its rows by key, and its
// plan must not depend on the table statistics: with autovacuum off, or
// before its first ANALYZE, they describe the nearly empty table the first
// plans were made for, and the connection keeps those plans (a scan of
// runs, cheapest for a tiny table) while the table grows, so every batch
// read the whole table. And the statements take arrays, whose lengths a
// custom plan knows: Postgres found the custom plans of some cheaper than
// their generic plan and planned them again on every execution (headsSQL
// spent twice as long being planned as running). A generic plan is made
// once per connection, and with scans ruled out it is the key lookup.
// set_config, not SET LOCAL: a pipeline runs in an implicit transaction,
// where SET LOCAL has no effect.
const keyPlansSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// lockRunsSQL locks a batch's runs in id order before anything updates
// them, so two batches sharing runs queue up instead of deadlocking.
const lockRunsSQL = `SELECT 1 FROM runs WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`

// lockSessionsSQL takes the session locks of the runs a batch may end,
// in key order.
const lockSessionsSQL = `SELECT pg_advisory_xact_lock($1, k) FROM (
		SELECT DISTINCT hashtext(current_schema() || '/' || tenant || '/' || session_id) AS k
		FROM runs WHERE id = ANY($2) AND session_id <> '' ORDER BY k
	) s`

// headsSQL reads, under the session locks, the oldest unfinished run of
// every session a batch may have ended a run of. It starts from the ended
// runs (by primary key) and walks each session in the session index: the
// planner cannot know that an IN over the ended runs' sessions is small,
// and an earlier form of this query scanned the whole runs table for
// every batch that ended a run.
var headsSQL = `SELECT h.* FROM (
		SELECT DISTINCT tenant, session_id FROM runs WHERE id = ANY($1) AND session_id <> ''
	) e CROSS JOIN LATERAL (
		SELECT ` + rules.RunCols + ` FROM runs r
		WHERE r.tenant = e.tenant AND r.session_id = e.session_id AND r.session_id <> ''
			AND r.status NOT IN (` + rules.TerminalSQL + `)
		ORDER BY r.seq LIMIT 1
	) h`

// TurnCommitApply sends the whole set as one pipeline (one round trip,
// one implicit transaction): lock the runs in order, one commit statement
// per wave (a wave holds at most one commit per run, so a run committed
// twice in a set advances turn by turn), then, when a commit may end a
// run, the session locks and the session heads.
func (d pgDriver) TurnCommitApply(ctx context.Context, ps []store.TurnCommitParams, now time.Time) ([]driver.TurnApplied, error) {
	var waves [][]int
	occurrences := map[string]int{}
	var ids, ending []string
	for i, p := range ps {
		k := occurrences[p.RunID]
		occurrences[p.RunID]++
		if k == 0 {
			ids = append(ids, p.RunID)
		}
		if k == len(waves) {
			waves = append(waves, nil)
		}
		waves[k] = append(waves[k], i)
		if p.Status.Terminal() {
			ending = append(ending, p.RunID)
		}
	}

	out := make([]driver.TurnApplied, len(ps))
	heads := map[[2]string]rules.RunRow{}
	err := d.batch(ctx, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(keyPlansSQL)
		if len(ids) > 1 {
			b.Queue(lockRunsSQL, ids)
		}
		for _, w := range waves {
			b.Queue(commitSQL, commitArgs(ps, w, now)...)
		}
		if len(ending) > 0 {
			b.Queue(lockSessionsSQL, lockSession, ending)
			b.Queue(headsSQL, ending)
		}
		return b
	}, func(br pgx.BatchResults) error {
		clear(out)
		clear(heads)
		if _, err := br.Exec(); err != nil {
			return err
		}
		if len(ids) > 1 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		for _, w := range waves {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			for rows.Next() {
				var ord int64
				a := driver.TurnApplied{Applied: true}
				if a.Run, err = scans.Run(rows, &ord, &a.LastSeq); err != nil {
					rows.Close()
					return err
				}
				out[w[ord-1]] = a
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(ending) > 0 {
			if _, err := br.Exec(); err != nil {
				return err
			}
			hs, err := collectBatch(br, scans.RunRow)
			if err != nil {
				return err
			}
			for _, h := range hs {
				heads[[2]string{h.Tenant, h.SessionID}] = h
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		r := out[i].Run
		if !out[i].Applied || !r.Status.Terminal() || r.SessionID == "" {
			continue
		}
		if h, ok := heads[[2]string{r.Tenant, r.SessionID}]; ok {
			out[i].Head = &h
		}
	}
	return out, nil
}

// TurnCommitRunsGet is one statement on the pool, after the commit's
// transaction.
func (d pgDriver) TurnCommitRunsGet(ctx context.Context, ids []string) ([]driver.RunRow, error) {
	return all(ctx, d.exec, `SELECT `+rules.RunCols+` FROM runs WHERE id = ANY($1)`, scans.RunRow, ids)
}

// commitArgs is the parameter list of commitSQL for the commits of one
// wave, in wave order (ord is the 1-based position in the wave).
func commitArgs(ps []store.TurnCommitParams, wave []int, now time.Time) []any {
	n := len(wave)
	var (
		runID                       = make([]string, 0, n)
		turn, nEvents               = make([]int32, 0, n), make([]int32, 0, n)
		status, errMsg              = make([]string, 0, n), make([]string, 0, n)
		args, answer                = make([][]byte, 0, n), make([][]byte, 0, n)
		prompt, completion, carried = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)

		sOrd                 []int64
		sIdx                 []int32
		sKind, sText, sModel []string
		sPrompt, sCompletion []int64
		sCreated             []time.Time
		eOrd, eK             []int64
		ev                   eventArrays
		spawned              = make([]int32, 0, n)
		waitIDs              = make([]string, 0, n)
		waitUntil            = make([]int64, 0, n)
	)
	for k, i := range wave {
		p := ps[i]
		ord := int64(k + 1)
		runID = append(runID, p.RunID)
		turn = append(turn, int32(p.Turn))
		status = append(status, string(p.Status))
		args = append(args, bytesArg(p.Args))
		answer = append(answer, bytesArg(p.Answer))
		errMsg = append(errMsg, p.Error)
		prompt = append(prompt, p.Usage.PromptTokens)
		completion = append(completion, p.Usage.CompletionTokens)
		carried = append(carried, p.DataBytesCarried)
		nEvents = append(nEvents, int32(len(p.Events)))
		spawned = append(spawned, int32(p.Spawned))
		waitIDs = append(waitIDs, string(rules.EncodeStrings(p.WaitIDs)))
		var until int64
		if !p.WaitUntil.IsZero() {
			until = p.WaitUntil.UnixMicro()
		}
		waitUntil = append(waitUntil, until)
		for _, x := range p.Steps {
			sOrd = append(sOrd, ord)
			sIdx = append(sIdx, int32(x.Index))
			sKind = append(sKind, string(x.Kind))
			sText = append(sText, x.Content)
			sModel = append(sModel, x.Model)
			sPrompt = append(sPrompt, x.Usage.PromptTokens)
			sCompletion = append(sCompletion, x.Usage.CompletionTokens)
			sCreated = append(sCreated, x.CreatedAt)
		}
		for j, e := range p.Events {
			eOrd = append(eOrd, ord)
			eK = append(eK, int64(j+1))
			ev.add(e)
		}
	}
	return []any{
		runID, turn, status, args, answer, errMsg, prompt, completion, carried, nEvents, now, rules.TransitionPairs,
		sOrd, sIdx, sKind, sText, sModel, sPrompt, sCompletion, sCreated,
		eOrd, eK, ev.v, ev.turn, ev.typ, ev.ts, ev.content, ev.args, ev.tp, ev.tc, ev.summary,
		spawned, waitIDs, waitUntil,
	}
}
