package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// runByIdempotencySQL finds a tenant's run by idempotency key. Repeating
// the partial unique index's predicate (a non-empty key) lets SQLite use
// the index: it cannot prove a bound parameter non-empty, and without it
// every submission with a key scanned the tenant's runs.
const runByIdempotencySQL = `SELECT ` + rules.RunCols + ` FROM runs
	WHERE tenant = ? AND idempotency_key = ? AND idempotency_key <> ''`

// queueCountSQL is rules.QueueGate's count: a tenant's max_queued_runs
// and its unfinished runs, counted no further than one past it.
// (SQLite's LIMIT cannot name an outer column, hence the second read of
// the tenant.)
var queueCountSQL = `SELECT t.max_queued_runs, (SELECT count(*) FROM (
		SELECT 1 FROM runs r WHERE r.tenant = ?1 AND r.status IN (` + rules.UnfinishedSQL + `)
		LIMIT (SELECT max_queued_runs + 1 FROM tenants WHERE id = ?1)))
	FROM tenants t WHERE t.id = ?1`

// QueueCount reads on the read pool: the gate's own accounting covers
// what the writer has queued and not committed.
func (d liteDriver) QueueCount(ctx context.Context, tenant string) (limit, unfinished int, err error) {
	err = d.s.rd.QueryRowContext(ctx, queueCountSQL, tenant).Scan(&limit, &unfinished)
	return limit, unfinished, mapErr(err)
}

// RunInsert is one write: the idempotency key and the agent's version
// read, the run with its first step and events inserted, and whether an
// earlier run of its session is unfinished, all in the writer.
func (d liteDriver) RunInsert(ctx context.Context, run agentfleet.Run, evs []agentfleet.Event) (created agentfleet.Run, free, inserted bool, err error) {
	err = d.s.write(ctx, func(tx *wtx) error {
		created, free, inserted = agentfleet.Run{}, false, false
		if run.IdempotencyKey != "" {
			var seen bool
			err := tx.QueryRowContext(ctx, `SELECT EXISTS (`+runByIdempotencySQL+`)`, run.Tenant, run.IdempotencyKey).Scan(&seen)
			if err != nil || seen {
				return err
			}
		}
		err := tx.QueryRowContext(ctx, `SELECT version FROM agents WHERE tenant = ? AND name = ?`, run.Tenant, run.Agent).Scan(&run.AgentVersion)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		row, err := scans.Run(tx.QueryRowContext(ctx, `INSERT INTO runs (id, tenant, agent, session_id, status, message, context, metadata,
				idempotency_key, batch_id, max_turns, max_tokens, deadline, event_seq, created_at, updated_at, parent_run_id, depth, agent_version)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+rules.RunCols,
			run.ID, run.Tenant, run.Agent, run.SessionID, string(run.Status), run.Message, blobArg(run.Context),
			textArg(rules.EncodeMetadata(run.Metadata)), run.IdempotencyKey, run.BatchID, run.MaxTurns, run.MaxTokens,
			tsArg(run.Deadline), run.EventSeq, run.CreatedAt.UnixMicro(), run.UpdatedAt.UnixMicro(), run.ParentRunID, run.Depth, run.AgentVersion))
		if err != nil {
			return err
		}
		if err := d.s.insertSteps(ctx, tx, []agentfleet.Step{rules.UserStep(row.Run)}); err != nil {
			return err
		}
		if err := d.s.insertEvents(ctx, tx, evs); err != nil {
			return err
		}
		created, inserted = row.Run, true
		free, err = startable(ctx, tx, row)
		return err
	})
	return created, free, inserted, mapErr(err)
}

func (d liteDriver) RunGetByIdempotency(ctx context.Context, tenant, key string) (rules.RunRow, error) {
	return one(ctx, d.exec, runByIdempotencySQL, scans.RunRow, tenant, key)
}

// sessionBlockedSQL: does the session have an unfinished run older than
// seq? Like rules.SessionHeadSQL, it repeats the session index's
// predicate (a non-empty session), which is what lets SQLite use that
// partial index; without it the lookups walked all of the tenant's runs.
var sessionBlockedSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE tenant = ? AND session_id = ? AND session_id <> '' AND seq < ?
		AND status NOT IN (` + rules.TerminalSQL + `))`

// startable reports whether a run may start now: it is queued and no
// earlier run of its session is unfinished.
func startable(ctx context.Context, q queryer, r rules.RunRow) (bool, error) {
	if r.Status != agentfleet.StatusQueued {
		return false, nil
	}
	if r.SessionID == "" {
		return true, nil
	}
	var blocked bool
	err := q.QueryRowContext(ctx, sessionBlockedSQL, r.Tenant, r.SessionID, r.Seq).Scan(&blocked)
	return !blocked, err
}

// sessionHead reads the session's oldest unfinished run (nil: none).
func sessionHead(ctx context.Context, q queryer, tenant, session string) (*rules.RunRow, error) {
	head, err := scans.Run(q.QueryRowContext(ctx, rules.SessionHeadSQL, tenant, session))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return &head, err
}
