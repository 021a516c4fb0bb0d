package wire

import "time"

// StatsBucket is one bucket of a stats answer: the tokens settled within
// it and the runs that ended within it, by final status (completed,
// failed, cancelled, max_turns; statuses with none are left out).
type StatsBucket struct {
	Start            time.Time      `json:"start"`
	PromptTokens     int64          `json:"prompt_tokens"`
	CompletionTokens int64          `json:"completion_tokens"`
	Ended            map[string]int `json:"ended"`
}

// TenantStats answers GET /v1/tenants/{id}/stats: every hour of the
// window, oldest first, empty hours included.
type TenantStats struct {
	Tenant        string        `json:"tenant"`
	Since         time.Time     `json:"since"`
	Until         time.Time     `json:"until"`
	BucketSeconds int           `json:"bucket_seconds"`
	Buckets       []StatsBucket `json:"buckets"`
}

// BatchStats answers GET /v1/batches/{id}/stats: the batch's run ends
// from its creation to its end (or now), in at most about 120 buckets,
// oldest first, empty ones included. Done counts its runs ended.
type BatchStats struct {
	BatchID       string        `json:"batch_id"`
	Status        string        `json:"status"`
	Total         int           `json:"total"`
	Done          int           `json:"done"`
	Since         time.Time     `json:"since"`
	Until         time.Time     `json:"until"`
	BucketSeconds int           `json:"bucket_seconds"`
	Buckets       []StatsBucket `json:"buckets"`
}

// FleetSample is what the dispatcher saw of the fleet at one moment:
// the worker slots announced, those running a turn, and the turns
// waiting in the queues (AF_RUNQ and the undelivered of AF_WORK).
type FleetSample struct {
	At         time.Time `json:"at"`
	Slots      int       `json:"slots"`
	SlotsInUse int       `json:"slots_in_use"`
	QueueDepth int64     `json:"queue_depth"`
}

// FleetStats answers GET /v1/fleet/stats (admin): the samples this
// dispatcher kept, oldest first, one every IntervalSeconds over the last
// hour at most (none before the dispatcher started).
type FleetStats struct {
	IntervalSeconds int           `json:"interval_seconds"`
	Samples         []FleetSample `json:"samples"`
}
