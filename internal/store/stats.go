package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentfleet/agentfleet"
)

// StatsReader reads the console's pictures: a tenant's tokens and run
// ends per hour, a batch's run ends over time. Each backend implements
// it with one grouped query over an index (migration 0019), so a week of
// 100,000 runs costs one index range scan.
type StatsReader interface {
	// TenantStatsGet buckets the tenant's settled usage (the usage
	// ledger) and its runs' ends by status over [Since, Until).
	TenantStatsGet(ctx context.Context, p TenantStatsGetParams) ([]StatsBucket, error)
	// BatchStatsGet buckets the ends of a batch's runs by status over
	// [Since, Until). The batch is not looked up: one of another tenant,
	// or none, has no buckets.
	BatchStatsGet(ctx context.Context, p BatchStatsGetParams) ([]StatsBucket, error)
}

// StatsWindow is the span [Since, Until) cut into buckets of Bucket (a
// whole number of seconds); bucket i starts at Since + i*Bucket.
type StatsWindow struct {
	Since, Until time.Time
	Bucket       time.Duration
}

// StatsBucketsMax is the most buckets one window may have.
const StatsBucketsMax = 10_000

// Buckets is how many buckets the window has (the last may be cut short).
func (w StatsWindow) Buckets() int {
	return int((w.Until.Sub(w.Since) + w.Bucket - 1) / w.Bucket)
}

// Validate says what is wrong with the window, as an ErrInvalid.
func (w StatsWindow) Validate() error {
	switch {
	case w.Since.IsZero() || w.Until.IsZero() || !w.Until.After(w.Since):
		return fmt.Errorf("stats window: since and until must be set and since before until (got %s and %s): %w",
			w.Since.Format(time.RFC3339), w.Until.Format(time.RFC3339), ErrInvalid)
	case w.Bucket < time.Second || w.Bucket%time.Second != 0:
		return fmt.Errorf("stats window: a bucket is a whole number of seconds, at least 1 (got %s): %w", w.Bucket, ErrInvalid)
	case w.Buckets() > StatsBucketsMax:
		return fmt.Errorf("stats window: %s in buckets of %s is %d buckets, more than %d: use wider buckets: %w",
			w.Until.Sub(w.Since), w.Bucket, w.Buckets(), StatsBucketsMax, ErrInvalid)
	}
	return nil
}

// Start is when bucket i starts.
func (w StatsWindow) Start(i int64) time.Time {
	return w.Since.Add(time.Duration(i) * w.Bucket).UTC().Truncate(time.Microsecond)
}

// TenantStatsGetParams names the tenant and the window.
type TenantStatsGetParams struct {
	Tenant string
	StatsWindow
}

// BatchStatsGetParams names the batch and the window.
type BatchStatsGetParams struct {
	BatchID string
	StatsWindow
}

// StatsBucket is one bucket with anything in it: usage settled within it
// and runs that ended within it (a run ends at its last update), by
// final status. Empty buckets are left out; buckets come in time order.
type StatsBucket struct {
	Start            time.Time
	PromptTokens     int64
	CompletionTokens int64
	Ended            map[agentfleet.RunStatus]int
}

// StatsMerge gathers rows of (bucket, tokens, status, count) into
// buckets in time order; a backend's queries yield such rows.
func StatsMerge(w StatsWindow, rows []StatsRow) []StatsBucket {
	byIndex := map[int64]*StatsBucket{}
	var order []int64
	for _, r := range rows {
		b := byIndex[r.Bucket]
		if b == nil {
			b = &StatsBucket{Start: w.Start(r.Bucket)}
			byIndex[r.Bucket] = b
			order = append(order, r.Bucket)
		}
		b.PromptTokens += r.PromptTokens
		b.CompletionTokens += r.CompletionTokens
		if r.Status != "" && r.Count > 0 {
			if b.Ended == nil {
				b.Ended = map[agentfleet.RunStatus]int{}
			}
			b.Ended[r.Status] += r.Count
		}
	}
	slices.Sort(order)
	out := make([]StatsBucket, 0, len(order))
	for _, i := range order {
		out = append(out, *byIndex[i])
	}
	return out
}

// StatsRow is one row of a backend's stats query: tokens of a bucket, or
// a count of runs of one status that ended in it.
type StatsRow struct {
	Bucket                         int64
	PromptTokens, CompletionTokens int64
	Status                         agentfleet.RunStatus
	Count                          int
}
