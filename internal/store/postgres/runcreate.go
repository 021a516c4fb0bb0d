package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// lockSessionSQL serialises a session's run creations and run ends, so
// "is any earlier run unfinished?" and "which run is next?" never race.
// The key includes the schema so stores sharing a database do not
// contend.
const lockSessionSQL = `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2 || '/' || $3))`

// queueCountSQL is rules.QueueGate's count: a tenant's max_queued_runs
// and its unfinished runs, counted no further than one past it (an index
// scan of runs_tenant_status).
var queueCountSQL = `SELECT t.max_queued_runs, (SELECT count(*) FROM (
		SELECT 1 FROM runs r WHERE r.tenant = t.id AND r.status IN (` + rules.UnfinishedSQL + `) LIMIT t.max_queued_runs + 1) x)
	FROM tenants t WHERE t.id = $1`

func (d pgDriver) QueueCount(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	err = d.do(ctx, true, func(q pgq) error { return q.QueryRow(ctx, queueCountSQL, tenant).Scan(&limit, &unfinished) })
	return limit, unfinished, err
}

// RunInsert is one round trip, one transaction: the session lock, the
// run (under its agent's current version) with its first step and
// events, and (under the lock) whether an earlier run of the session is
// unfinished. No row: the idempotency key was seen before, or the agent
// is not the tenant's (the insert selects its version).
func (d pgDriver) RunInsert(ctx context.Context, run agentfleet.Run, evs []agentfleet.Event) (agentfleet.Run, bool, bool, error) {
	insertArgs := append([]any{run.ID, run.Tenant, run.Agent, run.SessionID, string(run.Status), run.Message,
		bytesArg(run.Context), rules.EncodeMetadata(run.Metadata), run.IdempotencyKey, run.BatchID, run.MaxTurns,
		run.MaxTokens, tsArg(run.Deadline), run.EventSeq, run.CreatedAt, run.ParentRunID, run.Depth, string(agentfleet.StepUser)}, evArgs(evs)...)
	var created agentfleet.Run
	startable, inserted := false, false
	queue := func(b *pgx.Batch) {
		if run.SessionID != "" {
			b.Queue(lockSessionSQL, lockSession, run.Tenant, run.SessionID)
		}
		b.Queue(`WITH r AS (
				INSERT INTO runs (id, tenant, agent, session_id, status, message, context, metadata, idempotency_key,
					batch_id, max_turns, max_tokens, deadline, event_seq, created_at, updated_at, parent_run_id, depth, agent_version)
				SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bytea, $8::jsonb, $9::text,
					$10::text, $11::integer, $12::bigint, $13::timestamptz, $14::bigint, $15::timestamptz, $15::timestamptz, $16::text, $17::integer, a.version
				FROM agents a WHERE a.tenant = $2::text AND a.name = $3::text
				ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
				RETURNING `+rules.RunCols+`
			), s AS (
				INSERT INTO steps (run_id, turn, idx, kind, content, created_at) SELECT id, 0, 0, $18, message, created_at FROM r
			), e AS (
				`+insertEventsInto+` SELECT r.id, x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
				FROM r, `+evUnnest(19)+`
			)
			SELECT `+rules.RunCols+` FROM r`, insertArgs...)
		if run.SessionID != "" {
			b.Queue(`SELECT NOT EXISTS (SELECT 1 FROM runs o WHERE o.tenant = $1 AND o.session_id = $2 AND o.session_id <> ''
				AND o.status NOT IN (`+rules.TerminalSQL+`) AND o.seq < (SELECT seq FROM runs WHERE id = $3))`,
				run.Tenant, run.SessionID, run.ID)
		}
	}
	read := func(br pgx.BatchResults) error {
		created, startable, inserted = agentfleet.Run{}, false, false
		if run.SessionID != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		row, err := scans.Run(br.QueryRow())
		switch {
		case err == nil:
			created, startable, inserted = row.Run, true, true
		case errors.Is(err, pgx.ErrNoRows):
		default:
			return err
		}
		if run.SessionID != "" {
			return br.QueryRow().Scan(&startable)
		}
		return nil
	}
	var err error
	if run.SessionID == "" {
		// Shared with other calls in flight (a busy API submits many
		// runs at once); it locks no existing row.
		err = d.s.pipelined(ctx, pipeOrderNew, queue, read)
	} else {
		// Alone: a pipeline cannot order its session locks the way
		// turn commits take them (by the server's hash of the key).
		err = d.batch(ctx, func() *pgx.Batch {
			b := &pgx.Batch{}
			queue(b)
			return b
		}, read)
	}
	return created, startable, inserted, err
}

// RunGetByIdempotency repeats the partial unique index's predicate (a
// non-empty key), so a generic plan can use the index too.
func (d pgDriver) RunGetByIdempotency(ctx context.Context, tenant, key string) (rules.RunRow, error) {
	return one(ctx, d.exec, `SELECT `+rules.RunCols+` FROM runs WHERE tenant = $1 AND idempotency_key = $2 AND idempotency_key <> ''`,
		scans.RunRow, tenant, key)
}
