package sqlite

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
)

// The stats queries bucket by (ts - since) / width in microseconds. The
// ended-runs queries pin their partial indexes (migration 0019), whose
// predicates they repeat word for word: without statistics SQLite would
// walk runs_tenant_status or runs_batch instead and read every row.
const (
	statsTokensSQL = `SELECT (created_at - ?2) / ?4, sum(prompt_tokens), sum(completion_tokens) FROM usage_ledger INDEXED BY usage_ledger_tenant_tokens
		WHERE tenant = ?1 AND created_at >= ?2 AND created_at < ?3 GROUP BY 1`
	statsTenantEndedSQL = `SELECT (updated_at - ?2) / ?4, status, count(*) FROM runs INDEXED BY runs_tenant_ended
		WHERE tenant = ?1 AND status IN ('completed','failed','cancelled','max_turns') AND updated_at >= ?2 AND updated_at < ?3 GROUP BY 1, 2`
	statsBatchEndedSQL = `SELECT (updated_at - ?2) / ?4, status, count(*) FROM runs INDEXED BY runs_batch_ended
		WHERE batch_id = ?1 AND batch_id <> '' AND status IN ('completed','failed','cancelled','max_turns') AND updated_at >= ?2 AND updated_at < ?3 GROUP BY 1, 2`
)

func scanTokens(sc scanner) (store.StatsRow, error) {
	var r store.StatsRow
	return r, sc.Scan(&r.Bucket, &r.PromptTokens, &r.CompletionTokens)
}

func scanEnded(sc scanner) (store.StatsRow, error) {
	var r store.StatsRow
	return r, sc.Scan(&r.Bucket, &r.Status, &r.Count)
}

// TenantStatsGet reads both on one snapshot.
func (s *Store) TenantStatsGet(ctx context.Context, p store.TenantStatsGetParams) ([]store.StatsBucket, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var rows []store.StatsRow
	err := s.readTx(ctx, func(q queryer) error {
		e := exec{s: s, q: q}
		args := []any{p.Tenant, p.Since.UnixMicro(), p.Until.UnixMicro(), p.Bucket.Microseconds()}
		tokens, err := all(ctx, e, statsTokensSQL, scanTokens, args...)
		if err != nil {
			return err
		}
		ended, err := all(ctx, e, statsTenantEndedSQL, scanEnded, args...)
		rows = append(tokens, ended...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read stats of tenant %s: %w", p.Tenant, err)
	}
	return store.StatsMerge(p.StatsWindow, rows), nil
}

func (s *Store) BatchStatsGet(ctx context.Context, p store.BatchStatsGetParams) ([]store.StatsBucket, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := all(ctx, exec{s: s, q: s.rd}, statsBatchEndedSQL, scanEnded,
		p.BatchID, p.Since.UnixMicro(), p.Until.UnixMicro(), p.Bucket.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("read stats of batch %s: %w", p.BatchID, err)
	}
	return store.StatsMerge(p.StatsWindow, rows), nil
}
