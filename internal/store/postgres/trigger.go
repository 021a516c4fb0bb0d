package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const triggerCols = `id, tenant, name, agent, scheme, message, session_id, events, secret, prev_secret, prev_secret_until,
	max_turns, max_tokens, max_body_bytes, enabled, callback_url, created_at, updated_at`

func scanTrigger(sc scanner) (store.Trigger, error) {
	var t store.Trigger
	var events []byte
	var prevUntil *time.Time
	err := sc.Scan(&t.ID, &t.Tenant, &t.Name, &t.Agent, &t.Scheme, &t.Message, &t.SessionID, &events, &t.Secret, &t.PrevSecret, &prevUntil,
		&t.MaxTurns, &t.MaxTokens, &t.MaxBodyBytes, &t.Enabled, &t.CallbackURL, &t.CreatedAt, &t.UpdatedAt)
	if err != nil {
		return t, err
	}
	t.PrevSecretUntil, t.CreatedAt, t.UpdatedAt = tsVal(prevUntil), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	t.Events, err = rules.DecodeStrings(events)
	return t, err
}

func (s *Store) TriggerCreate(ctx context.Context, p store.TriggerCreateParams) (store.Trigger, error) {
	p, err := rules.TriggerCreate(p)
	if err != nil {
		return store.Trigger{}, err
	}
	t, err := queryOne(ctx, s, `INSERT INTO triggers (`+triggerCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '', NULL, $10, $11, $12, $13, $14, $15, $15) RETURNING `+triggerCols, scanTrigger,
		p.ID, p.Tenant, p.Name, p.Agent, p.Scheme, p.Message, p.SessionID, rules.EncodeStrings(p.Events), p.Secret,
		p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, p.Enabled, p.CallbackURL, rules.Now())
	if err != nil {
		return store.Trigger{}, fmt.Errorf("create trigger for %s: %w", p.Tenant, err)
	}
	return t, nil
}

func (s *Store) TriggerGetByID(ctx context.Context, p store.TriggerGetByIDParams) (store.Trigger, error) {
	t, err := queryOne(ctx, s, `SELECT `+triggerCols+` FROM triggers WHERE id = $1 AND ($2 = '' OR tenant = $2)`, scanTrigger, p.ID, p.Tenant)
	if err != nil {
		return store.Trigger{}, fmt.Errorf("get trigger %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TriggerList(ctx context.Context, p store.TriggerListParams) (store.TriggerListResult, error) {
	limit, err := rules.TriggerListLimit(p.Limit)
	if err != nil {
		return store.TriggerListResult{}, err
	}
	after := ""
	if p.Cursor != "" {
		if after, err = rules.DecodeTriggerCursor(p.Cursor); err != nil {
			return store.TriggerListResult{}, err
		}
	}
	ts, err := queryAll(ctx, s, `SELECT `+triggerCols+` FROM triggers
		WHERE tenant = $1 AND ($2 = '' OR id COLLATE "C" < $2) ORDER BY id COLLATE "C" DESC LIMIT $3`, scanTrigger, p.Tenant, after, limit+1)
	if err != nil {
		return store.TriggerListResult{}, fmt.Errorf("list triggers of %s: %w", p.Tenant, err)
	}
	return rules.TriggerPage(ts, limit), nil
}

func (s *Store) TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams) (store.Trigger, error) {
	if err := rules.TriggerUpdate(p); err != nil {
		return store.Trigger{}, err
	}
	var events []byte
	if p.Events != nil {
		events = rules.EncodeStrings(*p.Events)
		if events == nil {
			events = []byte("[]")
		}
	}
	// Every right-hand side reads the row as it was, so prev_secret
	// takes the secret being replaced.
	t, err := queryOne(ctx, s, `UPDATE triggers SET
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
		WHERE id = $1 AND tenant = $2 RETURNING `+triggerCols, scanTrigger,
		p.ID, p.Tenant, p.Name, p.Agent, p.Message, p.SessionID, events, p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, p.Enabled,
		p.CallbackURL, p.Secret, tsArg(rules.Time(p.PrevSecretUntil)), rules.Now())
	if err != nil {
		return store.Trigger{}, fmt.Errorf("update trigger %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TriggerDelete(ctx context.Context, p store.TriggerDeleteParams) error {
	var n int64
	err := s.withConn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `DELETE FROM triggers WHERE id = $1 AND tenant = $2`, p.ID, p.Tenant)
		n = tag.RowsAffected()
		return err
	})
	if err = mapErr(err); err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete trigger %s: %w", p.ID, err)
	}
	return nil
}

const deliveryCols = `id, trigger_id, delivery, received_at, event, action, outcome, reason, run_id, n`

func scanDeliveryRow(sc scanner) (rules.DeliveryRow, error) {
	var r rules.DeliveryRow
	err := sc.Scan(&r.Line.ID, &r.Line.TriggerID, &r.Line.Delivery, &r.Line.ReceivedAt, &r.Line.Event, &r.Line.Action, &r.Line.Outcome, &r.Line.Reason, &r.Line.RunID, &r.N, &r.Line.Payload)
	r.Line.ReceivedAt = r.Line.ReceivedAt.UTC()
	if len(r.Line.Payload) == 0 {
		r.Line.Payload = nil
	}
	return r, err
}

// TriggerDeliveryRecord numbers each trigger's lines after its newest
// and drops those Keep behind, in one pipeline: the first statement
// takes each trigger's log lock (an advisory lock, in trigger order), so
// the second, whose snapshot follows it, numbers after every line a
// concurrent record committed. The API groups a dispatcher's lines into
// one call, so the lock is contended only between dispatchers.
func (s *Store) TriggerDeliveryRecord(ctx context.Context, p store.TriggerDeliveryRecordParams) ([]store.TriggerDelivery, error) {
	p, err := rules.TriggerDeliveryRecord(p)
	if err != nil || len(p.Lines) == 0 {
		return nil, err
	}
	n := len(p.Lines)
	ids, trig, dlv, evt, act, out, why, run := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at, payload := make([]time.Time, n), make([][]byte, n)
	for i, l := range p.Lines {
		ids[i], trig[i], dlv[i], evt[i], act[i], out[i], why[i], run[i] = l.ID, l.TriggerID, l.Delivery, l.Event, l.Action, string(l.Outcome), l.Reason, l.RunID
		at[i], payload[i] = l.ReceivedAt, bytesArg(l.Payload)
	}
	var got []store.TriggerDelivery
	err = s.withBatch(ctx, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT count(pg_advisory_xact_lock($1, hashtext(t))) FROM unnest($2::text[]) t`, lockDeliveries, rules.DeliveryTriggers(p.Lines))
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
			SELECT `+deliveryCols+`, NULL::bytea FROM numbered ORDER BY ord`,
			ids, trig, dlv, at, evt, act, out, why, run, payload, p.Keep)
		return b
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := collectBatch(br, scanDeliveryRow)
		got = make([]store.TriggerDelivery, len(rows))
		for i, r := range rows {
			got[i] = r.Line
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record %d deliveries: %w", n, err)
	}
	return got, nil
}

func (s *Store) TriggerDeliveryList(ctx context.Context, p store.TriggerDeliveryListParams) (store.TriggerDeliveryListResult, error) {
	limit, err := rules.TriggerListLimit(p.Limit)
	if err != nil {
		return store.TriggerDeliveryListResult{}, err
	}
	afterN, afterID := int64(-1), ""
	if p.Cursor != "" {
		if afterN, afterID, err = rules.DecodeDeliveryCursor(p.Cursor); err != nil {
			return store.TriggerDeliveryListResult{}, err
		}
	}
	rows, err := queryAll(ctx, s, `SELECT `+deliveryCols+`, CASE WHEN $2 = '' THEN NULL ELSE payload END FROM trigger_deliveries
		WHERE trigger_id = $1 AND ($2 = '' OR delivery = $2) AND ($3 < 0 OR (n, id COLLATE "C") < ($3, $4 COLLATE "C"))
		ORDER BY n DESC, id COLLATE "C" DESC LIMIT $5`, scanDeliveryRow, p.TriggerID, p.Delivery, afterN, afterID, limit+1)
	if err != nil {
		return store.TriggerDeliveryListResult{}, fmt.Errorf("list deliveries of trigger %s: %w", p.TriggerID, err)
	}
	return rules.DeliveryPage(rows, limit), nil
}

// TriggerDigestClaim drops the triggers' lapsed claims and upserts the
// claims in one pipelined transaction; a row held since the cutoff
// keeps its delivery. Claims come sorted, so two dispatchers' calls
// lock rows in one order.
func (s *Store) TriggerDigestClaim(ctx context.Context, p store.TriggerDigestClaimParams) ([]string, error) {
	dc, err := rules.TriggerDigestClaim(p)
	if err != nil || len(dc.Claims) == 0 {
		return nil, err
	}
	n := len(dc.Claims)
	trig, dlv, digest := make([]string, n), make([]string, n), make([][]byte, n)
	for i, c := range dc.Claims {
		trig[i], dlv[i], digest[i] = c.TriggerID, c.Delivery, c.Digest
	}
	holders := make([]string, n)
	err = s.withBatch(ctx, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM trigger_digests WHERE trigger_id = ANY($1::text[]) AND claimed_at <= $2`, dc.Triggers(), dc.Cutoff)
		b.Queue(`INSERT INTO trigger_digests AS d (trigger_id, digest, delivery, claimed_at)
			SELECT t, g, v, $4 FROM unnest($1::text[], $2::bytea[], $3::text[]) WITH ORDINALITY AS i(t, g, v, ord) ORDER BY ord
			ON CONFLICT (trigger_id, digest) DO UPDATE SET
				delivery = CASE WHEN d.claimed_at <= $5 THEN excluded.delivery ELSE d.delivery END,
				claimed_at = CASE WHEN d.claimed_at <= $5 THEN excluded.claimed_at ELSE d.claimed_at END
			RETURNING trigger_id, digest, delivery`, trig, digest, dlv, dc.At, dc.Cutoff)
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
		at := make(map[string]int, n)
		for i, c := range dc.Claims {
			at[c.TriggerID+"\x00"+string(c.Digest)] = i
		}
		for rows.Next() {
			var t, v string
			var g []byte
			if err := rows.Scan(&t, &g, &v); err != nil {
				return err
			}
			holders[at[t+"\x00"+string(g)]] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d body digests: %w", n, err)
	}
	return dc.Holders(holders), nil
}
