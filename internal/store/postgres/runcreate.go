package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
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
		SELECT 1 FROM runs r WHERE r.tenant = t.id AND r.status IN (` + unfinishedList + `) LIMIT t.max_queued_runs + 1) x)
	FROM tenants t WHERE t.id = $1`

func (s *Store) countQueued(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	type counted struct{ limit, unfinished int }
	c, err := queryOne(ctx, s, queueCountSQL, func(sc scanner) (counted, error) {
		var c counted
		err := sc.Scan(&c.limit, &c.unfinished)
		return c, err
	}, tenant)
	if err != nil {
		return 0, 0, fmt.Errorf("count unfinished runs of tenant %s: %w", tenant, err)
	}
	return c.limit, c.unfinished, nil
}

func (s *Store) RunCreate(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	p, err := rules.RunCreate(p)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	done, err := s.Store.Queue.Admit(ctx, p.Tenant, 1, s.countQueued)
	var full *store.QueueFullError
	if errors.As(err, &full) && p.IdempotencyKey != "" {
		// A repeat of a run already admitted is never refused.
		if res, err := s.runByIdempotency(ctx, p); !isNotFound(err) {
			return res, err
		}
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s: %w", p.Tenant, err)
	}
	admitted := 0 // of the one admitted, what was created
	defer func() { done(admitted) }()
	now := rules.Now()
	evs, err := rules.Events(p.Events, 0, now)
	if err != nil {
		return store.RunCreateResult{}, err
	}
	run := rules.NewRun(p, now)
	insertArgs := append([]any{run.ID, run.Tenant, run.Agent, run.SessionID, string(run.Status), run.Message,
		bytesArg(run.Context), rules.EncodeMetadata(run.Metadata), run.IdempotencyKey, run.BatchID, run.MaxTurns,
		run.MaxTokens, tsArg(run.Deadline), int64(len(evs)), now, run.ParentRunID, run.Depth, string(agentfleet.StepUser)}, evArgs(evs)...)
	var res store.RunCreateResult
	created := false
	// One round trip, one transaction: the session lock, the run (under
	// its agent's current version) with its first step and events, and (under the lock) whether an earlier
	// run of the session is unfinished.
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
				RETURNING `+runCols+`
			), s AS (
				INSERT INTO steps (run_id, turn, idx, kind, content, created_at) SELECT id, 0, 0, $18, message, created_at FROM r
			), e AS (
				`+insertEventsInto+` SELECT r.id, x.k, x.v, x.turn, x.type, x.ts, x.content, x.args, x.tp, x.tc, x.summary
				FROM r, `+evUnnest(19)+`
			)
			SELECT `+runCols+` FROM r`, insertArgs...)
		if run.SessionID != "" {
			b.Queue(`SELECT NOT EXISTS (SELECT 1 FROM runs o WHERE o.tenant = $1 AND o.session_id = $2 AND o.session_id <> ''
				AND o.status NOT IN (`+terminalList+`) AND o.seq < (SELECT seq FROM runs WHERE id = $3))`,
				run.Tenant, run.SessionID, run.ID)
		}
	}
	read := func(br pgx.BatchResults) error {
		res, created = store.RunCreateResult{}, false
		if run.SessionID != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		row, err := scanRun(br.QueryRow())
		switch {
		case err == nil:
			created = true
			rules.Number(evs, row.Run, 0)
			res = store.RunCreateResult{Run: row.Run, Created: true, Startable: true, Events: evs}
		case errors.Is(err, pgx.ErrNoRows):
			created = false
		default:
			return err
		}
		if run.SessionID != "" {
			var free bool
			if err := br.QueryRow().Scan(&free); err != nil {
				return err
			}
			res.Startable = free
		}
		return nil
	}
	if run.SessionID == "" {
		// Shared with other calls in flight (a busy API submits many
		// runs at once); it locks no existing row.
		err = s.pipelined(ctx, pipeOrderNew, queue, read)
	} else {
		// Alone: a pipeline cannot order its session locks the way
		// turn commits take them (by the server's hash of the key).
		err = s.withBatch(ctx, func() *pgx.Batch {
			b := &pgx.Batch{}
			queue(b)
			return b
		}, read)
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run %s for tenant %s: %w", p.ID, p.Tenant, err)
	}
	if created {
		admitted = 1
		return res, nil
	}
	// No row: the idempotency key was seen before, or the agent is
	// not the tenant's (the insert selects its version).
	unknownAgent := fmt.Errorf("create run for tenant %s: agent %q: %w", p.Tenant, p.Agent, store.ErrUnknownAgent)
	if p.IdempotencyKey == "" {
		return store.RunCreateResult{}, unknownAgent
	}
	res, err = s.runByIdempotency(ctx, p)
	if isNotFound(err) {
		return res, unknownAgent
	}
	return res, err
}

// runByIdempotency is RunCreate's answer when the idempotency key was seen
// before: that run. The non-empty condition is the partial unique index's
// predicate, so a generic plan can use the index too.
func (s *Store) runByIdempotency(ctx context.Context, p store.RunCreateParams) (store.RunCreateResult, error) {
	prev, err := queryOne(ctx, s, `SELECT `+runCols+` FROM runs WHERE tenant = $1 AND idempotency_key = $2 AND idempotency_key <> ''`,
		scanRunRow, p.Tenant, p.IdempotencyKey)
	res := store.RunCreateResult{Run: prev.Run}
	if err == nil {
		res.Startable, err = s.startable(ctx, prev)
	}
	if err != nil {
		return store.RunCreateResult{}, fmt.Errorf("create run for tenant %s with idempotency key %q: %w", p.Tenant, p.IdempotencyKey, err)
	}
	return res, nil
}

// startable reports whether a run may start now: it is queued and no
// earlier run of its session is unfinished.
func (s *Store) startable(ctx context.Context, r rules.RunRow) (bool, error) {
	if r.Status != agentfleet.StatusQueued {
		return false, nil
	}
	if r.SessionID == "" {
		return true, nil
	}
	return queryOne(ctx, s, `SELECT NOT EXISTS (SELECT 1 FROM runs WHERE tenant = $1 AND session_id = $2 AND session_id <> '' AND seq < $3
		AND status NOT IN (`+terminalList+`))`, func(sc scanner) (bool, error) {
		var free bool
		err := sc.Scan(&free)
		return free, err
	}, r.Tenant, r.SessionID, r.Seq)
}
