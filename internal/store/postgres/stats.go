package postgres

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// The stats queries bucket by whole seconds since $2 ($4 seconds a
// bucket), over the indexes of migration 0019.
var (
	statsTokensSQL = `SELECT floor(extract(epoch FROM created_at - $2::timestamptz) / $4::float8)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint
		FROM usage_ledger WHERE tenant = $1 AND created_at >= $2 AND created_at < $3 GROUP BY 1`
	statsTenantEndedSQL = `SELECT floor(extract(epoch FROM updated_at - $2::timestamptz) / $4::float8)::bigint, status, count(*)
		FROM runs WHERE tenant = $1 AND status IN (` + rules.TerminalSQL + `) AND updated_at >= $2 AND updated_at < $3 GROUP BY 1, 2`
	statsBatchEndedSQL = `SELECT floor(extract(epoch FROM updated_at - $2::timestamptz) / $4::float8)::bigint, status, count(*)
		FROM runs WHERE batch_id = $1 AND batch_id <> '' AND status IN (` + rules.TerminalSQL + `) AND updated_at >= $2 AND updated_at < $3 GROUP BY 1, 2`
)

func scanTokens(sc scanner) (store.StatsRow, error) {
	var r store.StatsRow
	return r, sc.Scan(&r.Bucket, &r.PromptTokens, &r.CompletionTokens)
}

func scanEnded(sc scanner) (store.StatsRow, error) {
	var r store.StatsRow
	var status string
	err := sc.Scan(&r.Bucket, &status, &r.Count)
	r.Status = agentfleet.RunStatus(status)
	return r, err
}

func (s *Store) TenantStatsGet(ctx context.Context, p store.TenantStatsGetParams) ([]store.StatsBucket, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	e := exec{s: s}
	args := []any{p.Tenant, p.Since, p.Until, p.Bucket.Seconds()}
	tokens, err := all(ctx, e, statsTokensSQL, scanTokens, args...)
	if err != nil {
		return nil, fmt.Errorf("read token stats of tenant %s: %w", p.Tenant, err)
	}
	ended, err := all(ctx, e, statsTenantEndedSQL, scanEnded, args...)
	if err != nil {
		return nil, fmt.Errorf("read run stats of tenant %s: %w", p.Tenant, err)
	}
	return store.StatsMerge(p.StatsWindow, append(tokens, ended...)), nil
}

func (s *Store) BatchStatsGet(ctx context.Context, p store.BatchStatsGetParams) ([]store.StatsBucket, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := all(ctx, exec{s: s}, statsBatchEndedSQL, scanEnded, p.BatchID, p.Since, p.Until, p.Bucket.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read stats of batch %s: %w", p.BatchID, err)
	}
	return store.StatsMerge(p.StatsWindow, rows), nil
}
