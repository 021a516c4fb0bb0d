// The console's pictures: a tenant's tokens and run ends per hour, a
// batch's run ends over time, and the fleet's slots and queue depth over
// the last hour (admin). The first two are read from the store's
// grouped queries (store.StatsReader); the fleet's from the samples the
// dispatcher keeps in memory (Config.FleetSamples).

package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

const (
	// TenantStatsHoursDefault is the window of GET /v1/tenants/{id}/stats
	// without ?hours: a week; TenantStatsHoursMax the longest, 31 days.
	TenantStatsHoursDefault = 7 * 24
	TenantStatsHoursMax     = 31 * 24
	// batchStatsBuckets is about how many buckets a batch's stats have.
	batchStatsBuckets = 120
)

// FleetSampler is what GET /v1/fleet/stats reads: the samples the
// dispatcher kept, oldest first, and how far apart they are.
type FleetSampler interface {
	FleetSamples() (every time.Duration, samples []wire.FleetSample)
}

func (s *Server) registerStats() {
	s.mux.HandleFunc("GET /v1/tenants/{id}/stats", s.authed(s.handleTenantStats))
	s.mux.HandleFunc("GET /v1/batches/{id}/stats", s.authed(s.handleBatchStats))
	s.mux.HandleFunc("GET /v1/fleet/stats", s.adminOnly(s.handleFleetStats))
}

// handleTenantStats answers every hour of the last ?hours (default a
// week), up to the hour now is in.
func (s *Server) handleTenantStats(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hours := TenantStatsHoursDefault
	if v := r.URL.Query().Get("hours"); v != "" {
		if hours, err = strconv.Atoi(v); err != nil || hours < 1 || hours > TenantStatsHoursMax {
			s.fail(w, r, errBadRequest("hours must be a whole number from 1 to %d (got %q)", TenantStatsHoursMax, v))
			return
		}
	}
	until := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	win := store.StatsWindow{Since: until.Add(-time.Duration(hours) * time.Hour), Until: until, Bucket: time.Hour}
	got, err := s.cfg.Store.TenantStatsGet(r.Context(), store.TenantStatsGetParams{Tenant: id, StatsWindow: win})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.TenantStats{Tenant: id, Since: win.Since, Until: win.Until,
		BucketSeconds: int(win.Bucket / time.Second), Buckets: denseBuckets(win, got)})
}

// handleBatchStats cuts the batch's life (creation to end, or now) into
// about batchStatsBuckets buckets of a round width.
func (s *Server) handleBatchStats(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := s.lookupBatch(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	end := b.FinishedAt
	if end.IsZero() {
		end = time.Now().UTC()
	}
	win := batchWindow(b.CreatedAt, end)
	got, err := s.cfg.Store.BatchStatsGet(r.Context(), store.BatchStatsGetParams{BatchID: b.ID, StatsWindow: win})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	done := 0
	for st, n := range b.Counts {
		if st.Terminal() {
			done += n
		}
	}
	writeJSON(w, http.StatusOK, wire.BatchStats{BatchID: b.ID, Status: string(b.Status), Total: b.Total, Done: done,
		Since: win.Since, Until: win.Until, BucketSeconds: int(win.Bucket / time.Second), Buckets: denseBuckets(win, got)})
}

func (s *Server) handleFleetStats(w http.ResponseWriter, r *http.Request, _ principal) {
	out := wire.FleetStats{Samples: []wire.FleetSample{}}
	if s.cfg.FleetSamples != nil {
		every, samples := s.cfg.FleetSamples.FleetSamples()
		out.IntervalSeconds = int(every / time.Second)
		if samples != nil {
			out.Samples = samples
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// roundWidths are the bucket widths a batch's stats pick from.
var roundWidths = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
	30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// batchWindow is [from, to] in the narrowest round width that needs at
// most about batchStatsBuckets buckets, starting on a whole second.
func batchWindow(from, to time.Time) store.StatsWindow {
	since := from.UTC().Truncate(time.Second)
	span := to.Sub(since) + time.Second // the end's own instant is in
	width := roundWidths[len(roundWidths)-1]
	for _, wd := range roundWidths {
		if span/wd < batchStatsBuckets {
			width = wd
			break
		}
	}
	n := (span + width - 1) / width
	if n > store.StatsBucketsMax {
		width = span/store.StatsBucketsMax + time.Second
		width = width.Truncate(time.Second)
		n = (span + width - 1) / width
	}
	return store.StatsWindow{Since: since, Until: since.Add(n * width), Bucket: width}
}

// denseBuckets lays the store's buckets over every bucket of the window.
func denseBuckets(win store.StatsWindow, got []store.StatsBucket) []wire.StatsBucket {
	out := make([]wire.StatsBucket, win.Buckets())
	for i := range out {
		out[i] = wire.StatsBucket{Start: win.Start(int64(i)), Ended: map[string]int{}}
	}
	for _, b := range got {
		i := int(b.Start.Sub(win.Since) / win.Bucket)
		if i < 0 || i >= len(out) {
			continue
		}
		out[i].PromptTokens += b.PromptTokens
		out[i].CompletionTokens += b.CompletionTokens
		for st, n := range b.Ended {
			out[i].Ended[string(st)] += n
		}
	}
	return out
}
