package sqlite

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func (e exec) TriggerInsert(ctx context.Context, p store.TriggerCreateParams, now time.Time) (store.Trigger, error) {
	return row(ctx, e, rules.TriggerInsertSQL, scans.Trigger,
		p.ID, p.Tenant, p.Name, p.Agent, p.Scheme, p.Message, p.SessionID, textArg(rules.EncodeStrings(p.Events)), p.Secret,
		p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, boolInt(p.Enabled), p.CallbackURL, now.UnixMicro())
}

func (e exec) TriggerGet(ctx context.Context, id, tenant string) (store.Trigger, error) {
	return one(ctx, e, `SELECT `+rules.TriggerCols+` FROM triggers WHERE id = ? AND (? = '' OR tenant = ?)`, scans.Trigger, id, tenant, tenant)
}

func (e exec) TriggerList(ctx context.Context, tenant, afterID string, limit int) ([]store.Trigger, error) {
	return all(ctx, e, `SELECT `+rules.TriggerCols+` FROM triggers
		WHERE tenant = ? AND (? = '' OR id < ?) ORDER BY id DESC LIMIT ?`, scans.Trigger, tenant, afterID, afterID, limit)
}

func (e exec) TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams, prevUntil, now time.Time) (store.Trigger, error) {
	var events any
	setEvents := p.Events != nil
	if setEvents && len(*p.Events) > 0 {
		events = textArg(rules.EncodeStrings(*p.Events))
	}
	var enabled any
	if p.Enabled != nil {
		enabled = boolInt(*p.Enabled)
	}
	return row(ctx, e, `UPDATE triggers SET
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
		WHERE id = ? AND tenant = ? RETURNING `+rules.TriggerCols, scans.Trigger,
		p.Name, p.Agent, p.Message, p.SessionID, boolInt(setEvents), events, p.MaxTurns, p.MaxTokens, p.MaxBodyBytes, enabled,
		p.CallbackURL, p.Secret, p.Secret, tsArg(prevUntil), p.Secret, now.UnixMicro(), p.ID, p.Tenant)
}

func (e exec) TriggerDelete(ctx context.Context, tenant, id string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM triggers WHERE id = ? AND tenant = ?`, id, tenant)
	return n > 0, err
}

// TriggerDeliveryInsert numbers on the one writer connection, so the
// numbers are exact.
func (e exec) TriggerDeliveryInsert(ctx context.Context, lines []store.TriggerDelivery, keep int) ([]store.TriggerDelivery, error) {
	var got []store.TriggerDelivery
	err := e.write(ctx, func(tx *wtx) error {
		got = got[:0]
		for _, l := range lines {
			row, err := scans.Delivery(tx.QueryRowContext(ctx, `INSERT INTO trigger_deliveries
					(id, trigger_id, n, delivery, received_at, event, action, outcome, reason, run_id, payload)
				SELECT ?, ?, COALESCE((SELECT n FROM trigger_deliveries WHERE trigger_id = ? ORDER BY n DESC LIMIT 1), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ?
				RETURNING `+rules.DeliveryCols+`, NULL`,
				l.ID, l.TriggerID, l.TriggerID, l.Delivery, l.ReceivedAt.UnixMicro(), l.Event, l.Action, string(l.Outcome), l.Reason, l.RunID,
				blobArg(l.Payload)))
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM trigger_deliveries WHERE trigger_id = ? AND n <= ?`, l.TriggerID, row.N-int64(keep)); err != nil {
				return err
			}
			got = append(got, row.Line)
		}
		return nil
	})
	return got, err
}

func (e exec) TriggerDeliveryList(ctx context.Context, p driver.TriggerDeliveryListParams) ([]driver.DeliveryRow, error) {
	return all(ctx, e, `SELECT `+rules.DeliveryCols+`, CASE WHEN ? = '' THEN NULL ELSE payload END FROM trigger_deliveries
		WHERE trigger_id = ? AND (? = '' OR delivery = ?) AND (? < 0 OR n < ? OR (n = ? AND id < ?))
		ORDER BY n DESC, id DESC LIMIT ?`, scans.Delivery,
		p.Delivery, p.TriggerID, p.Delivery, p.Delivery, p.AfterN, p.AfterN, p.AfterN, p.AfterID, p.Limit)
}

func (e exec) TriggerDigestUpsert(ctx context.Context, triggers []string, claims []store.DigestClaim, at, cutoff time.Time) ([]string, error) {
	holders := make([]string, len(claims))
	err := e.write(ctx, func(tx *wtx) error {
		for _, id := range triggers {
			if _, err := tx.ExecContext(ctx, `DELETE FROM trigger_digests WHERE trigger_id = ? AND claimed_at <= ?`, id, cutoff.UnixMicro()); err != nil {
				return err
			}
		}
		for i, c := range claims {
			err := tx.QueryRowContext(ctx, `INSERT INTO trigger_digests (trigger_id, digest, delivery, claimed_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (trigger_id, digest) DO UPDATE SET
					delivery = CASE WHEN claimed_at <= ? THEN excluded.delivery ELSE delivery END,
					claimed_at = CASE WHEN claimed_at <= ? THEN excluded.claimed_at ELSE claimed_at END
				RETURNING delivery`, c.TriggerID, c.Digest, c.Delivery, at.UnixMicro(), cutoff.UnixMicro(), cutoff.UnixMicro()).Scan(&holders[i])
			if err != nil {
				return err
			}
		}
		return nil
	})
	return holders, err
}
