package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// evUnnest turns the nine event arrays of evArgs, from parameter $first
// on, into rows x(v, turn, type, ts, content, args, tp, tc, summary, k)
// with k the 1-based position.
func evUnnest(first int) string {
	types := []string{"smallint", "integer", "text", "timestamptz", "text", "bytea", "bigint", "bigint", "text"}
	ps := make([]string, len(types))
	for i, t := range types {
		ps[i] = "$" + strconv.Itoa(first+i) + "::" + t + "[]"
	}
	return `unnest(` + strings.Join(ps, ", ") + `) WITH ORDINALITY AS x(v, turn, type, ts, content, args, tp, tc, summary, k)`
}

const insertEventsInto = `INSERT INTO events (run_id, seq, v, turn, type, ts, content, args, tokens_prompt, tokens_completion, summary)`

// evArgs is the column arrays of events for evUnnest.
func evArgs(evs []agentfleet.Event) []any {
	var a eventArrays
	for _, e := range evs {
		a.add(e)
	}
	return []any{a.v, a.turn, a.typ, a.ts, a.content, a.args, a.tp, a.tc, a.summary}
}

type eventArrays struct {
	v       []int16
	turn    []int32
	typ     []string
	ts      []time.Time
	content []string
	args    [][]byte
	tp, tc  []*int64
	summary []string
}

func (a *eventArrays) add(e agentfleet.Event) {
	a.v = append(a.v, int16(e.V))
	a.turn = append(a.turn, int32(e.Turn))
	a.typ = append(a.typ, string(e.Type))
	a.ts = append(a.ts, e.TS)
	a.content = append(a.content, e.Content)
	a.args = append(a.args, bytesArg(e.Args))
	if e.Tokens != nil {
		p, c := e.Tokens.Prompt, e.Tokens.Completion
		a.tp, a.tc = append(a.tp, &p), append(a.tc, &c)
	} else {
		a.tp, a.tc = append(a.tp, nil), append(a.tc, nil)
	}
	a.summary = append(a.summary, e.Summary)
}

func (e exec) RunList(ctx context.Context, p store.RunListParams, after int64) ([]rules.RunRow, error) {
	q, args := rules.RunListQuery(rules.RunCols, p, after, true)
	return all(ctx, e, rules.NumberParams(q), scans.RunRow, args...)
}

// RunLock reads a run and locks its row for the transaction.
func (t exec) RunLock(ctx context.Context, id string) (rules.RunRow, error) {
	return t.runByID(ctx, `SELECT `+rules.RunCols+` FROM runs WHERE id = $1 FOR NO KEY UPDATE`, id)
}

// runByID reads run id with q.
func (t exec) runByID(ctx context.Context, q, id string) (rules.RunRow, error) {
	r, err := scans.Run(t.q().QueryRow(ctx, q, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, mapErr(err)
}

// RunUpdate writes the mutable columns a transition or cancel changes.
func (t exec) RunUpdate(ctx context.Context, r rules.RunRow) (rules.RunRow, error) {
	return scans.Run(t.q().QueryRow(ctx, rules.RunUpdateSQL, r.ID, string(r.Status), r.Error, bytesArg(r.Answer), r.Wake, r.EventSeq, r.CancelRequested, r.CancelReason, r.UpdatedAt))
}

// EventInsert appends events numbered after lastSeq, inside tx.
func (t exec) EventInsert(ctx context.Context, runID string, lastSeq int64, evs []agentfleet.Event) error {
	if len(evs) == 0 {
		return nil
	}
	args := append([]any{runID, lastSeq}, evArgs(evs)...)
	_, err := t.q().Exec(ctx, insertEventsInto+`
		SELECT $1, $2 + x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary FROM `+evUnnest(3), args...)
	return err
}

// RunSessionHead reads, inside the ending transaction and under the
// session lock, the session's head.
func (t exec) RunSessionHead(ctx context.Context, tenant, session string) (*rules.RunRow, error) {
	if _, err := t.q().Exec(ctx, lockSessionSQL, lockSession, tenant, session); err != nil {
		return nil, err
	}
	head, err := scans.Run(t.q().QueryRow(ctx, rules.SessionHeadSQL, tenant, session))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &head, err
}

func (e exec) RunCountActive(ctx context.Context, tenant string) (int, error) {
	return one(ctx, e, `SELECT count(*) FROM runs WHERE tenant = $1 AND status = 'running'`, rules.ScanInt, tenant)
}

func (e exec) RunCountByStatus(ctx context.Context, tenant string) ([]driver.Count, error) {
	return all(ctx, e, `SELECT status, count(*) FROM runs WHERE tenant = $1 GROUP BY status`, rules.ScanCount, tenant)
}

// fencedInsertCTE is the CTE m that inserts a row of table (n parameters
// from $first, in cols' order, the run's id and turn first), fenced: only
// for a run that has committed exactly turn-1 turns and not ended, once
// per key.
func fencedInsertCTE(table, cols, key string, n int) func(first int) string {
	return func(first int) string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = "$" + strconv.Itoa(first+i)
		}
		return `m AS (
		INSERT INTO ` + table + ` (` + cols + `)
		SELECT id, ` + strings.Join(ps[1:], ", ") + ` FROM runs
		WHERE id = ` + ps[0] + ` AND turn = ` + ps[1] + ` - 1 AND status NOT IN (` + rules.TerminalSQL + `)
		ON CONFLICT (` + key + `) DO NOTHING RETURNING ` + cols + `
	)`
	}
}

// insertReplyCTE inserts the reply of 8 parameters (run, turn, content,
// model, prompt, completion, reported, created).
var insertReplyCTE = fencedInsertCTE("model_replies", rules.ReplyCols, "run_id, turn", 8)

// recordChargeSQL records a reply (or a journal entry: insert is its
// CTE m, cols its columns) and, only if it did, settles its charge, in
// one statement (one round trip, one transaction). It returns the record
// and the charge (NULL when there was nothing to charge), or no row when
// the record was not inserted. The record's parameters follow the
// charge's.
func recordChargeSQL(p store.BudgetSettleParams, insert func(first int) string, cols string) string {
	return `WITH ` + insert(len(settleArgs(p))+1) + `, ` + settleCTEs(p, `EXISTS (SELECT 1 FROM m)`) + `
		SELECT ` + cols + `, (SELECT charged FROM c) FROM m`
}

// recordStatements are a record's statements: alone, and with its charge
// to a reservation or to none (recordChargeSQL).
type recordStatements struct{ alone, reserved, unreserved string }

func recordStatementsOf(insert func(first int) string, cols string) recordStatements {
	return recordStatements{
		alone:      `WITH ` + insert(1) + ` SELECT ` + cols + `, NULL::bigint FROM m`,
		reserved:   recordChargeSQL(store.BudgetSettleParams{ReservationID: "x"}, insert, cols),
		unreserved: recordChargeSQL(store.BudgetSettleParams{}, insert, cols),
	}
}

// pick is the statement of a record of run runID with charge, the
// charge's arguments (the record's follow), and the record's order in
// the shared pipeline: a charge locks its tenant's row, while the insert
// only reads the run's (the record tables have no foreign key to runs,
// see migration 0003).
func (r recordStatements) pick(charge *store.BudgetSettleParams, runID string) (q string, args []any, order string) {
	if charge == nil {
		return r.alone, nil, pipeOrderRun + runID
	}
	q = r.reserved
	if charge.ReservationID == "" {
		q = r.unreserved
	}
	return q, settleArgs(*charge), pipeOrderTenant + charge.Tenant
}

var replyStatements = recordStatementsOf(insertReplyCTE, rules.ReplyCols)

// ModelReplyInsert is one statement in the common case: the fenced insert
// and, with a Charge, the settle (gated on the insert). Anything else (a
// reply already there, a lost fence) is sorted out by the rules after,
// and charges nothing.
func (d pgDriver) ModelReplyInsert(ctx context.Context, p store.ModelReplyRecordParams) (store.ModelReplyRecordResult, bool, error) {
	r := p.ModelReply
	q, args, order := replyStatements.pick(p.Charge, r.RunID)
	args = append(args, r.RunID, r.Turn, r.Content, r.Model, r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt)
	// Through the shared pipeline: concurrent turns' records share one
	// round trip and one commit, and those of unlimited tenants one
	// statement (unlimitedRecordMerger).
	var m recordedReply
	queue := func(b *pgx.Batch) { b.Queue(q, args...) }
	read := func(br pgx.BatchResults) error {
		m = recordedReply{}
		var err error
		m.reply, err = scans.Reply(br.QueryRow(), &m.charged)
		if errors.Is(err, pgx.ErrNoRows) {
			m.notInserted = true
			return nil
		}
		return err
	}
	var err error
	if p.Charge != nil && p.Charge.ReservationID == "" {
		c := &unlimitedRecordCall{reply: r, charge: *p.Charge, out: &m}
		err = d.s.pipelinedMerge(ctx, order, queue, read, &unlimitedRecordMerger, c)
	} else {
		err = d.s.pipelined(ctx, order, queue, read)
	}
	if isNotFound(err) || err == nil && m.notInserted {
		return store.ModelReplyRecordResult{}, false, nil
	}
	if err != nil {
		return store.ModelReplyRecordResult{}, false, err
	}
	res := store.ModelReplyRecordResult{Reply: m.reply}
	res.Settled, res.ChargeErr = recordCharged(p.Charge, m.charged)
	return res, true, nil
}

// recordCharged is the charge of a record just inserted by a statement
// of recordChargeSQL: charged NULL means its reservation was gone.
func recordCharged(charge *store.BudgetSettleParams, charged *int64) (store.BudgetSettleResult, error) {
	switch {
	case charge == nil:
		return store.BudgetSettleResult{}, nil
	case charged == nil:
		return store.BudgetSettleResult{}, fmt.Errorf("charge %s: %w", rules.SettleName(*charge), settleNotFound(*charge))
	}
	return store.BudgetSettleResult{Charged: *charged, Overage: charge.Usage.Total() - *charged}, nil
}

// recordedReply is what one ModelReplyRecord statement returned.
type recordedReply struct {
	reply       store.ModelReply
	charged     *int64
	notInserted bool
}

// unlimitedRecordCall is one ModelReplyRecord with an unreserved charge
// (the tenant had no limits when its turn was loaded) in a pipeline.
type unlimitedRecordCall struct {
	reply  store.ModelReply
	charge store.BudgetSettleParams
	out    *recordedReply
}

// replyKey names the turn a reply belongs to.
func replyKey(runID string, turn int) string { return runID + "/" + strconv.Itoa(turn) }

// recordUnlimitedManySQL records replies and charges them to tenants
// without limits, for calls of distinct turns in one statement: the
// merged form of recordChargeUnreservedSQL's common case. A reply is
// inserted only where the single statement would insert it (fenced by
// the run's turn and status, once per turn) and only for a tenant that
// still has no limits (locked FOR KEY SHARE, in id order, as the single
// statement does); each inserted reply gets its ledger row, charged in
// full. Whatever is not inserted is left to the single statement: the
// merger's read fails the pipeline then.
//
// p: $1 tenant, $2 run_id, $3 turn, $4 content, $5 model, $6 prompt,
// $7 completion, $8 usage_reported, $9 created_at; the charge's
// $10 model, $11 prompt, $12 completion, $13 total, $14 now, $15 run.
var recordUnlimitedManySQL = `WITH p AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::text[], $6::bigint[],
			$7::bigint[], $8::boolean[], $9::timestamptz[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::timestamptz[], $15::text[])
			AS p(tenant, run_id, turn, content, model, prompt, completion, reported, created_at,
				c_model, c_prompt, c_completion, c_total, c_now, c_run)
	), k AS MATERIALIZED (
		SELECT t.id FROM tenants t
		WHERE t.id = ANY($1::text[]) AND t.token_limit = 0 AND t.tokens_per_minute = 0
		ORDER BY t.id FOR KEY SHARE
	), m AS (
		INSERT INTO model_replies (` + rules.ReplyCols + `)
		SELECT r.id, p.turn, p.content, p.model, p.prompt, p.completion, p.reported, p.created_at
		FROM p JOIN k ON k.id = p.tenant
			JOIN runs r ON r.id = p.run_id AND r.turn = p.turn - 1 AND r.status NOT IN (` + rules.TerminalSQL + `)
		ON CONFLICT (run_id, turn) DO NOTHING RETURNING ` + rules.ReplyCols + `
	), l AS (
		INSERT INTO usage_ledger (tenant, run_id, model, prompt_tokens, completion_tokens, charged, overage, created_at)
		SELECT p.tenant, p.c_run, p.c_model, p.c_prompt, p.c_completion, p.c_total, 0, p.c_now
		FROM m JOIN p ON p.run_id = m.run_id AND p.turn = m.turn
	)
	SELECT ` + rules.PrefixCols("m.", rules.ReplyCols) + `, p.c_total FROM m JOIN p ON p.run_id = m.run_id AND p.turn = m.turn`

// unlimitedRecordMerger runs the reply records of unlimited tenants in a
// pipeline as one statement. Production bench: the single statements
// were a fifth of PostgreSQL's time per turn (pg_stat_statements).
var unlimitedRecordMerger = pipeMerger{
	key: func(c *pipeCall) string {
		r := c.arg.(*unlimitedRecordCall).reply
		return replyKey(r.RunID, r.Turn)
	},
	queue: func(b *pgx.Batch, calls []*pipeCall) {
		n := len(calls)
		tenants, runs, contents, models, cModels := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		turns := make([]int32, n)
		prompts, completions, cPrompts, cCompletions, cTotals := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		reported := make([]bool, n)
		created, cNow, cRuns := make([]time.Time, n), make([]time.Time, n), make([]string, n)
		for i, pc := range calls {
			c := pc.arg.(*unlimitedRecordCall)
			r, ch := c.reply, c.charge
			tenants[i], runs[i], turns[i], contents[i], models[i] = ch.Tenant, r.RunID, int32(r.Turn), r.Content, r.Model
			prompts[i], completions[i], reported[i], created[i] = r.Usage.PromptTokens, r.Usage.CompletionTokens, r.UsageReported, r.CreatedAt
			cModels[i], cPrompts[i], cCompletions[i], cTotals[i], cNow[i], cRuns[i] = ch.Model, ch.Usage.PromptTokens, ch.Usage.CompletionTokens, ch.Usage.Total(), ch.Now, ch.RunID
		}
		// Key lookups, planned once per connection (see keyPlansSQL).
		b.Queue(keyPlansSQL)
		b.Queue(recordUnlimitedManySQL, tenants, runs, turns, contents, models, prompts, completions, reported, created,
			cModels, cPrompts, cCompletions, cTotals, cNow, cRuns)
	},
	read: func(br pgx.BatchResults, calls []*pipeCall) error {
		byTurn := make(map[string]*unlimitedRecordCall, len(calls))
		for _, pc := range calls {
			c := pc.arg.(*unlimitedRecordCall)
			*c.out = recordedReply{}
			byTurn[replyKey(c.reply.RunID, c.reply.Turn)] = c
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		got, err := collectBatch(br, func(sc scanner) (recordedReply, error) {
			m := recordedReply{charged: new(int64)}
			var err error
			m.reply, err = scans.Reply(sc, m.charged)
			return m, err
		})
		if err != nil {
			return err
		}
		for _, m := range got {
			c := byTurn[replyKey(m.reply.RunID, m.reply.Turn)]
			if c == nil {
				return fmt.Errorf("reply records: run %s turn %d was not asked for", m.reply.RunID, m.reply.Turn)
			}
			*c.out = m
		}
		if found := len(got); found != len(calls) {
			// A reply was not inserted (a lost fence, a reply already
			// there, a tenant given limits): each call runs alone and
			// sorts out its own.
			return fmt.Errorf("reply records: %d of %d inserted: %w", found, len(calls), store.ErrNotFound)
		}
		return nil
	},
}

func (e exec) ModelReplyGet(ctx context.Context, runID string, turn int) (store.ModelReply, error) {
	return one(ctx, e, `SELECT `+rules.ReplyCols+` FROM model_replies WHERE run_id = $1 AND turn = $2`, scans.ReplyRow, runID, turn)
}

func (e exec) StepList(ctx context.Context, runID string, from, to int) ([]agentfleet.Step, error) {
	return all(ctx, e, rules.StepsSQL, scans.Step, runID, from, to)
}

// EventAppend is one statement: the run's seq moves on and the events
// go in numbered after it.
func (e exec) EventAppend(ctx context.Context, runID string, evs []agentfleet.Event) (agentfleet.Run, int64, error) {
	type head struct {
		last int64
		run  agentfleet.Run
	}
	args := append([]any{runID, int64(len(evs))}, evArgs(evs)...)
	h, err := one(ctx, e, `WITH r AS (
			UPDATE runs SET event_seq = event_seq + $2 WHERE id = $1 RETURNING event_seq - $2 AS last, tenant, session_id
		), e AS (
			`+insertEventsInto+` SELECT $1, r.last + x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
			FROM r, `+evUnnest(3)+`
		)
		SELECT last, tenant, session_id FROM r`, func(sc scanner) (head, error) {
		h := head{run: agentfleet.Run{ID: runID}}
		return h, sc.Scan(&h.last, &h.run.Tenant, &h.run.SessionID)
	}, args...)
	return h.run, h.last, err
}

func (e exec) EventList(ctx context.Context, p store.EventListByRunParams) ([]agentfleet.Event, error) {
	var limit *int
	if p.Limit > 0 {
		limit = &p.Limit
	}
	return all(ctx, e, rules.EventListSQL, scans.Event, p.RunID, p.AfterSeq, limit)
}
