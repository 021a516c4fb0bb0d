package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const triggerCols = `id, tenant, name, agent, scheme, message, session_id, events, secret, prev_secret, prev_secret_until,
	max_turns, max_tokens, max_body_bytes, enabled, callback_url, created_at, updated_at`

func scanTrigger(sc interface{ Scan(...any) error }) (store.Trigger, error) {
	var t store.Trigger
	var events []byte
	var prevUntil sql.NullInt64
	var created, updated int64
	err := sc.Scan(&t.ID, &t.Tenant, &t.Name, &t.Agent, &t.Scheme, &t.Message, &t.SessionID, &events, &t.Secret, &t.PrevSecret, &prevUntil,
		&t.MaxTurns, &t.MaxTokens, &t.MaxBodyBytes, &t.Enabled, &t.CallbackURL, &created, &updated)
	if err != nil {
		return t, err
	}
	t.PrevSecretUntil, t.CreatedAt, t.UpdatedAt = tsVal(prevUntil), fromMicros(created), fromMicros(updated)
	t.Events, err = rules.DecodeStrings(events)
	return t, err
}

func (s *Store) TriggerCreate(ctx context.Context, p store.TriggerCreateParams) (store.Trigger, error) {
	p, err := rules.TriggerCreate(p)
	if err != nil {
		return store.Trigger{}, err
	}
	now := rules.Now().UnixMicro()
	var t store.Trigger
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		t, err = scanTrigger(tx.QueryRowContext(ctx, `INSERT INTO triggers (`+triggerCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', NULL, ?, ?, ?, ?, ?, ?, ?) RETURNING `+triggerCols,
			p.ID, p.Tenant, p.Name, p.Agent, p.Scheme, p.Message, p.SessionID, textArg(rules.EncodeStrings(p.Events)), p.Secret,
			p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, boolInt(p.Enabled), p.CallbackURL, now, now))
		return err
	})
	if err != nil {
		return store.Trigger{}, fmt.Errorf("create trigger for %s: %w", p.Tenant, err)
	}
	return t, nil
}

func (s *Store) TriggerGetByID(ctx context.Context, p store.TriggerGetByIDParams) (store.Trigger, error) {
	t, err := scanTrigger(s.rd.QueryRowContext(ctx, `SELECT `+triggerCols+` FROM triggers WHERE id = ? AND (? = '' OR tenant = ?)`, p.ID, p.Tenant, p.Tenant))
	if err != nil {
		return store.Trigger{}, fmt.Errorf("get trigger %s: %w", p.ID, mapErr(err))
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
	rows, err := s.rd.QueryContext(ctx, `SELECT `+triggerCols+` FROM triggers
		WHERE tenant = ? AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, p.Tenant, after, after, limit+1)
	if err != nil {
		return store.TriggerListResult{}, fmt.Errorf("list triggers of %s: %w", p.Tenant, err)
	}
	ts, err := collect(rows, scanTrigger)
	if err != nil {
		return store.TriggerListResult{}, fmt.Errorf("list triggers of %s: %w", p.Tenant, err)
	}
	return rules.TriggerPage(ts, limit), nil
}

func (s *Store) TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams) (store.Trigger, error) {
	if err := rules.TriggerUpdate(p); err != nil {
		return store.Trigger{}, err
	}
	var events any
	setEvents := p.Events != nil
	if setEvents {
		events = textArg(rules.EncodeStrings(*p.Events))
		if len(*p.Events) == 0 {
			events = nil
		}
	}
	var enabled any
	if p.Enabled != nil {
		enabled = boolInt(*p.Enabled)
	}
	var t store.Trigger
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		// Every right-hand side reads the row as it was, so prev_secret
		// takes the secret being replaced.
		t, err = scanTrigger(tx.QueryRowContext(ctx, `UPDATE triggers SET
				name = COALESCE(?, name),
				agent = COALESCE(?, agent),
				message = COALESCE(?, message),
				session_id = COALESCE(?, session_id),
				events = CASE WHEN ? THEN ? ELSE events END,
				max_turns = COALESCE(?, max_turns),
				max_tokens = COALESCE(?, max_tokens),
				max_body_bytes = COALESCE(?, max_body_bytes),
				enabled = COALESCE(?, enabled),
				callback_url = COALESCE(?, callback_url),
				prev_secret = CASE WHEN ? IS NULL THEN prev_secret ELSE secret END,
				prev_secret_until = CASE WHEN ? IS NULL THEN prev_secret_until ELSE ? END,
				secret = COALESCE(?, secret),
				updated_at = ?
			WHERE id = ? AND tenant = ? RETURNING `+triggerCols,
			p.Name, p.Agent, p.Message, p.SessionID, boolInt(setEvents), events, p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, enabled,
			p.CallbackURL, p.Secret, p.Secret, tsArg(rules.Time(p.PrevSecretUntil)), p.Secret, rules.Now().UnixMicro(), p.ID, p.Tenant))
		return err
	})
	if err != nil {
		return store.Trigger{}, fmt.Errorf("update trigger %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TriggerDelete(ctx context.Context, p store.TriggerDeleteParams) error {
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM triggers WHERE id = ? AND tenant = ?`, p.ID, p.Tenant)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete trigger %s: %w", p.ID, err)
	}
	return nil
}

const deliveryCols = `id, trigger_id, delivery, received_at, event, action, outcome, reason, run_id, n`

func scanDeliveryRow(sc interface{ Scan(...any) error }) (rules.DeliveryRow, error) {
	var r rules.DeliveryRow
	var at int64
	var payload []byte
	err := sc.Scan(&r.Line.ID, &r.Line.TriggerID, &r.Line.Delivery, &at, &r.Line.Event, &r.Line.Action, &r.Line.Outcome, &r.Line.Reason, &r.Line.RunID, &r.N, &payload)
	r.Line.ReceivedAt = fromMicros(at)
	if len(payload) > 0 {
		r.Line.Payload = payload
	}
	return r, err
}

// TriggerDeliveryRecord numbers each line after its trigger's newest and
// drops those Keep behind it; the writer is one connection, so the
// numbers are exact.
func (s *Store) TriggerDeliveryRecord(ctx context.Context, p store.TriggerDeliveryRecordParams) ([]store.TriggerDelivery, error) {
	p, err := rules.TriggerDeliveryRecord(p)
	if err != nil || len(p.Lines) == 0 {
		return nil, err
	}
	var got []store.TriggerDelivery
	err = s.write(ctx, func(tx *wtx) error {
		got = got[:0]
		for _, l := range p.Lines {
			row, err := scanDeliveryRow(tx.QueryRowContext(ctx, `INSERT INTO trigger_deliveries
					(id, trigger_id, n, delivery, received_at, event, action, outcome, reason, run_id, payload)
				SELECT ?, ?, COALESCE((SELECT n FROM trigger_deliveries WHERE trigger_id = ? ORDER BY n DESC LIMIT 1), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ?
				RETURNING `+deliveryCols+`, NULL`,
				l.ID, l.TriggerID, l.TriggerID, l.Delivery, l.ReceivedAt.UnixMicro(), l.Event, l.Action, string(l.Outcome), l.Reason, l.RunID,
				blobArg(l.Payload)))
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM trigger_deliveries WHERE trigger_id = ? AND n <= ?`, l.TriggerID, row.N-int64(p.Keep)); err != nil {
				return err
			}
			got = append(got, row.Line)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d deliveries: %w", len(p.Lines), err)
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
	rows, err := s.rd.QueryContext(ctx, `SELECT `+deliveryCols+`, CASE WHEN ? = '' THEN NULL ELSE payload END FROM trigger_deliveries
		WHERE trigger_id = ? AND (? = '' OR delivery = ?) AND (? < 0 OR n < ? OR (n = ? AND id < ?))
		ORDER BY n DESC, id DESC LIMIT ?`, p.Delivery, p.TriggerID, p.Delivery, p.Delivery, afterN, afterN, afterN, afterID, limit+1)
	if err != nil {
		return store.TriggerDeliveryListResult{}, fmt.Errorf("list deliveries of trigger %s: %w", p.TriggerID, err)
	}
	rs, err := collect(rows, scanDeliveryRow)
	if err != nil {
		return store.TriggerDeliveryListResult{}, fmt.Errorf("list deliveries of trigger %s: %w", p.TriggerID, err)
	}
	return rules.DeliveryPage(rs, limit), nil
}

// TriggerDigestClaim drops each trigger's lapsed claims, then upserts
// each claim: a row held since the cutoff keeps its delivery.
func (s *Store) TriggerDigestClaim(ctx context.Context, p store.TriggerDigestClaimParams) ([]string, error) {
	dc, err := rules.TriggerDigestClaim(p)
	if err != nil || len(dc.Claims) == 0 {
		return nil, err
	}
	at, cutoff := dc.At.UnixMicro(), dc.Cutoff.UnixMicro()
	holders := make([]string, len(dc.Claims))
	err = s.write(ctx, func(tx *wtx) error {
		for _, id := range dc.Triggers() {
			if _, err := tx.ExecContext(ctx, `DELETE FROM trigger_digests WHERE trigger_id = ? AND claimed_at <= ?`, id, cutoff); err != nil {
				return err
			}
		}
		for i, c := range dc.Claims {
			err := tx.QueryRowContext(ctx, `INSERT INTO trigger_digests (trigger_id, digest, delivery, claimed_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (trigger_id, digest) DO UPDATE SET
					delivery = CASE WHEN claimed_at <= ? THEN excluded.delivery ELSE delivery END,
					claimed_at = CASE WHEN claimed_at <= ? THEN excluded.claimed_at ELSE claimed_at END
				RETURNING delivery`, c.TriggerID, c.Digest, c.Delivery, at, cutoff, cutoff).Scan(&holders[i])
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d body digests: %w", len(dc.Claims), mapErr(err))
	}
	return dc.Holders(holders), nil
}
