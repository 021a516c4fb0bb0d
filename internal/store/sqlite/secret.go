package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

const secretCols = rules.SecretCols

func (e exec) SecretUpsert(ctx context.Context, p store.SecretPutParams, now time.Time) (agentfleet.Secret, error) {
	at := now.UnixMicro()
	return row(ctx, e, `INSERT INTO secrets (tenant, name, sealed, key_id, hosts, header, format, expose, version, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
		ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed, key_id = excluded.key_id, hosts = excluded.hosts,
			header = excluded.header, format = excluded.format, expose = excluded.expose,
			version = secrets.version + 1, updated_at = excluded.updated_at
		RETURNING `+secretCols, scans.Secret,
		p.Tenant, p.Name, p.Sealed, p.KeyID, string(rules.EncodeStrings(p.Hosts)), p.Header, p.Format, boolInt(p.Expose), at, at)
}

func (e exec) SecretGet(ctx context.Context, tenant, name string) (agentfleet.Secret, error) {
	return one(ctx, e, `SELECT `+secretCols+` FROM secrets WHERE tenant = ? AND name = ?`, scans.Secret, tenant, name)
}

func (e exec) SecretList(ctx context.Context, tenant string) ([]agentfleet.Secret, error) {
	return all(ctx, e, `SELECT `+secretCols+` FROM secrets WHERE tenant = ? ORDER BY name`, scans.Secret, tenant)
}

func (e exec) SecretDelete(ctx context.Context, tenant, name string) (bool, error) {
	n, err := e.run(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, tenant, name)
	return n > 0, err
}

func (e exec) SecretSealedList(ctx context.Context, tenant string) ([]store.SealedSecret, error) {
	return all(ctx, e, `SELECT tenant, name, sealed, key_id FROM secrets WHERE tenant = ? ORDER BY name`, rules.ScanSealedSecret, tenant)
}

func (e exec) SealedList(ctx context.Context, kind store.SealedKind, owner, name string, limit int) ([]store.Sealed, error) {
	scan := rules.ScanSealedOf(kind)
	switch kind {
	case store.SealedSecretValue:
		return all(ctx, e, `SELECT tenant, name, sealed FROM secrets
			WHERE (tenant, name) > (?, ?) ORDER BY tenant, name LIMIT ?`, scan, owner, name, limit)
	case store.SealedCallbackValue:
		return all(ctx, e, `SELECT tenant, '', secret FROM tenant_callback_secrets
			WHERE tenant > ? AND secret <> '' ORDER BY tenant LIMIT ?`, scan, owner, limit)
	case store.SealedTrigger:
		return all(ctx, e, `SELECT id, '', secret FROM triggers WHERE id > ? AND secret <> '' ORDER BY id LIMIT ?`, scan, owner, limit)
	case store.SealedTriggerPrev:
		return all(ctx, e, `SELECT id, '', prev_secret FROM triggers
			WHERE id > ? AND prev_secret <> '' ORDER BY id LIMIT ?`, scan, owner, limit)
	}
	return nil, fmt.Errorf("%w: sealed kind %q", store.ErrInvalid, kind)
}

func (e exec) SealedGet(ctx context.Context, r store.SealedRef) (string, error) {
	switch r.Kind {
	case store.SealedSecretValue:
		return one(ctx, e, `SELECT sealed FROM secrets WHERE tenant = ? AND name = ?`, rules.ScanString, r.Owner, r.Name)
	case store.SealedCallbackValue:
		return one(ctx, e, `SELECT secret FROM tenant_callback_secrets WHERE tenant = ?`, rules.ScanString, r.Owner)
	case store.SealedTrigger:
		return one(ctx, e, `SELECT secret FROM triggers WHERE id = ?`, rules.ScanString, r.Owner)
	case store.SealedTriggerPrev:
		return one(ctx, e, `SELECT prev_secret FROM triggers WHERE id = ?`, rules.ScanString, r.Owner)
	}
	return "", fmt.Errorf("%w: sealed kind %q", store.ErrInvalid, r.Kind)
}

func (e exec) SealedReplace(ctx context.Context, p store.SealedReplaceParams) (bool, error) {
	var n int64
	var err error
	switch r := p.Ref; r.Kind {
	case store.SealedSecretValue:
		n, err = e.run(ctx, `UPDATE secrets SET sealed = ?, key_id = ? WHERE tenant = ? AND name = ? AND sealed = ?`,
			p.New, p.KeyID, r.Owner, r.Name, p.Old)
	case store.SealedCallbackValue:
		n, err = e.run(ctx, `UPDATE tenant_callback_secrets SET secret = ? WHERE tenant = ? AND secret = ?`, p.New, r.Owner, p.Old)
	case store.SealedTrigger:
		n, err = e.run(ctx, `UPDATE triggers SET secret = ? WHERE id = ? AND secret = ?`, p.New, r.Owner, p.Old)
	case store.SealedTriggerPrev:
		n, err = e.run(ctx, `UPDATE triggers SET prev_secret = ? WHERE id = ? AND prev_secret = ?`, p.New, r.Owner, p.Old)
	default:
		return false, fmt.Errorf("%w: sealed kind %q", store.ErrInvalid, r.Kind)
	}
	return n > 0, err
}
