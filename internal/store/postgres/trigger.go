package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) TriggerInsert(ctx context.Context, p store.TriggerCreateParams, now time.Time) (store.Trigger, error) {
	return one(ctx, e, rules.TriggerInsertSQL, scans.Trigger,
		p.ID, p.Tenant, p.Name, p.Agent, p.Scheme, p.Message, p.SessionID, rules.EncodeStrings(p.Events), p.Secret,
		p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, p.Enabled, p.CallbackURL, now)
}

func (e exec) TriggerGet(ctx context.Context, id, tenant string) (store.Trigger, error) {
	return one(ctx, e, `SELECT `+rules.TriggerCols+` FROM triggers WHERE id = $1 AND ($2 = '' OR tenant = $2)`, scans.Trigger, id, tenant)
}

func (e exec) TriggerList(ctx context.Context, tenant, afterID string, limit int) ([]store.Trigger, error) {
	return all(ctx, e, `SELECT `+rules.TriggerCols+` FROM triggers
		WHERE tenant = $1 AND ($2 = '' OR id COLLATE "C" < $2) ORDER BY id COLLATE "C" DESC LIMIT $3`, scans.Trigger, tenant, afterID, limit)
}

func (e exec) TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams, prevUntil, now time.Time) (store.Trigger, error) {
	var events []byte
	if p.Events != nil {
		events = rules.EncodeStrings(*p.Events)
		if events == nil {
			events = []byte("[]")
		}
	}
	return one(ctx, e, `UPDATE triggers SET
			name = COALESCE($3::text, name),
			agent = COALESCE($4::text, agent),
			message = COALESCE($5::text, message),
			session_id = COALESCE($6::text, session_id),
			events = CASE WHEN $7::jsonb IS NULL THEN events WHEN $7::jsonb = '[]'::jsonb THEN NULL ELSE $7::jsonb END,
			max_turns = COALESCE($8::integer, max_turns),
			max_tokens = COALESCE($9::bigint, max_tokens),
			max_body_bytes = COALESCE($10::bigint, max_body_bytes),
			enabled = COALESCE($11::boolean, enabled),
			callback_url = COALESCE($12::text, callback_url),
			prev_secret = CASE WHEN $13::text IS NULL THEN prev_secret ELSE secret END,
			prev_secret_until = CASE WHEN $13::text IS NULL THEN prev_secret_until ELSE $14::timestamptz END,
			secret = COALESCE($13::text, secret),
			updated_at = $15
		WHERE id = $1 AND tenant = $2 RETURNING `+rules.TriggerCols, scans.Trigger,
		p.ID, p.Tenant, p.Name, p.Agent, p.Message, p.SessionID, events, p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, p.Enabled,
		p.CallbackURL, p.Secret, tsArg(prevUntil), now)
}

func (e exec) TriggerDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM triggers WHERE id = $1 AND tenant = $2`, id, tenant)
	return n > 0, err
}

// TriggerDeliveryInsert is one pipeline: the first statement takes each
// trigger's log lock (an advisory lock, in trigger order), so the
// second, whose snapshot follows it, numbers after every line a
// concurrent record committed. The API groups a dispatcher's lines into
// one call, so the lock is contended only between dispatchers.
func (e exec) TriggerDeliveryInsert(ctx context.Context, lines []store.TriggerDelivery, keep int) ([]store.TriggerDelivery, error) {
	n := len(lines)
	ids, trig, dlv, evt, act, out, why, run := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at, payload := make([]time.Time, n), make([][]byte, n)
	for i, l := range lines {
		ids[i], trig[i], dlv[i], evt[i], act[i], out[i], why[i], run[i] = l.ID, l.TriggerID, l.Delivery, l.Event, l.Action, string(l.Outcome), l.Reason, l.RunID
		at[i], payload[i] = l.ReceivedAt, bytesArg(l.Payload)
	}
	var got []store.TriggerDelivery
	err := e.batch(ctx, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT count(pg_advisory_xact_lock($1, hashtext(t))) FROM unnest($2::text[]) t`, lockDeliveries, rules.DeliveryTriggers(lines))
		b.Queue(`WITH input AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[])
					WITH ORDINALITY AS i(id, trigger_id, delivery, received_at, event, action, outcome, reason, run_id, payload, ord)
			), base AS (
				SELECT t.trigger_id, COALESCE((SELECT n FROM trigger_deliveries d WHERE d.trigger_id = t.trigger_id ORDER BY n DESC LIMIT 1), 0) AS n0
				FROM (SELECT DISTINCT trigger_id FROM input) t
			), numbered AS (
				SELECT i.*, b.n0 + row_number() OVER (PARTITION BY i.trigger_id ORDER BY i.ord) AS n FROM input i JOIN base b USING (trigger_id)
			), tops AS (
				SELECT trigger_id, max(n) AS top FROM numbered GROUP BY trigger_id
			), ins AS (
				-- A statement's DELETE does not see its own INSERT: lines of
				-- this call that are past the keep already are not inserted.
				INSERT INTO trigger_deliveries (id, trigger_id, n, delivery, received_at, event, action, outcome, reason, run_id, payload)
				SELECT id, trigger_id, n, delivery, received_at, event, action, outcome, reason, run_id, payload
				FROM numbered JOIN tops USING (trigger_id) WHERE n > top - $11
			), del AS (
				DELETE FROM trigger_deliveries d USING tops WHERE d.trigger_id = tops.trigger_id AND d.n <= tops.top - $11
			)
			SELECT `+rules.DeliveryCols+`, NULL::bytea FROM numbered ORDER BY ord`,
			ids, trig, dlv, at, evt, act, out, why, run, payload, keep)
		return b
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := collectBatch(br, scans.Delivery)
		got = make([]store.TriggerDelivery, len(rows))
		for i, r := range rows {
			got[i] = r.Line
		}
		return err
	})
	return got, err
}

func (e exec) TriggerDeliveryList(ctx context.Context, p driver.TriggerDeliveryListParams) ([]driver.DeliveryRow, error) {
	return all(ctx, e, `SELECT `+rules.DeliveryCols+`, CASE WHEN $2 = '' THEN NULL ELSE payload END FROM trigger_deliveries
		WHERE trigger_id = $1 AND ($2 = '' OR delivery = $2) AND ($3 < 0 OR (n, id COLLATE "C") < ($3, $4 COLLATE "C"))
		ORDER BY n DESC, id COLLATE "C" DESC LIMIT $5`, scans.Delivery, p.TriggerID, p.Delivery, p.AfterN, p.AfterID, p.Limit)
}

// TriggerDigestUpsert is one pipelined transaction.
func (e exec) TriggerDigestUpsert(ctx context.Context, triggers []string, claims []store.DigestClaim, at, cutoff time.Time) ([]string, error) {
	n := len(claims)
	trig, dlv, digest := make([]string, n), make([]string, n), make([][]byte, n)
	for i, c := range claims {
		trig[i], dlv[i], digest[i] = c.TriggerID, c.Delivery, c.Digest
	}
	holders := make([]string, n)
	err := e.batch(ctx, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM trigger_digests WHERE trigger_id = ANY($1::text[]) AND claimed_at <= $2`, triggers, cutoff)
		b.Queue(`INSERT INTO trigger_digests AS d (trigger_id, digest, delivery, claimed_at)
			SELECT t, g, v, $4 FROM unnest($1::text[], $2::bytea[], $3::text[]) WITH ORDINALITY AS i(t, g, v, ord) ORDER BY ord
			ON CONFLICT (trigger_id, digest) DO UPDATE SET
				delivery = CASE WHEN d.claimed_at <= $5 THEN excluded.delivery ELSE d.delivery END,
				claimed_at = CASE WHEN d.claimed_at <= $5 THEN excluded.claimed_at ELSE d.claimed_at END
			RETURNING trigger_id, digest, delivery`, trig, digest, dlv, at, cutoff)
		return b
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		pos := make(map[string]int, n)
		for i, c := range claims {
			pos[c.TriggerID+"\x00"+string(c.Digest)] = i
		}
		for rows.Next() {
			var t, v string
			var g []byte
			if err := rows.Scan(&t, &g, &v); err != nil {
				return err
			}
			holders[pos[t+"\x00"+string(g)]] = v
		}
		return rows.Err()
	})
	return holders, err
}
