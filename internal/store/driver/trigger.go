package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// TriggerExecutor stores triggers, their delivery logs and their body
// digest claims.
type TriggerExecutor interface {
	// TriggerInsert stores a trigger (validated, id set) created at now,
	// with no previous secret.
	TriggerInsert(ctx context.Context, p store.TriggerCreateParams, now time.Time) (store.Trigger, error)
	// TriggerGet reads a trigger, of tenant when tenant is not empty.
	TriggerGet(ctx context.Context, id, tenant string) (store.Trigger, error)
	// TriggerList reads up to limit of a tenant's triggers by id
	// descending (bytewise), below afterID when it is not empty.
	TriggerList(ctx context.Context, tenant, afterID string, limit int) ([]store.Trigger, error)
	// TriggerUpdate sets p's set fields of a tenant's trigger, updated at
	// now. Events set to none clears them; a new Secret moves the one it
	// replaces to the previous secret, valid until prevUntil (zero: no
	// end). Every right-hand side reads the row as it was.
	TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams, prevUntil, now time.Time) (store.Trigger, error)
	// TriggerDelete deletes a tenant's trigger and reports whether there
	// was one.
	TriggerDelete(ctx context.Context, tenant, id string) (bool, error)

	// TriggerDeliveryInsert numbers each line after its trigger's newest
	// (one after the other, in order), inserts it and drops the lines
	// keep or more behind its trigger's newest; it returns the lines as
	// numbered (their Payload left out). Concurrent calls number
	// exactly: a backend takes each trigger's log lock (in trigger
	// order) first.
	TriggerDeliveryInsert(ctx context.Context, lines []store.TriggerDelivery, keep int) ([]store.TriggerDelivery, error)
	// TriggerDeliveryList reads up to Limit lines of a trigger, newest
	// first (by number, then id descending), below (AfterN, AfterID)
	// when AfterN is not negative; with Delivery set only that
	// delivery's lines, with their payloads.
	TriggerDeliveryList(ctx context.Context, p TriggerDeliveryListParams) ([]DeliveryRow, error)
	// TriggerDigestUpsert drops the claims of triggers held since cutoff
	// or before, then claims each of claims (sorted by trigger and
	// digest, each once) at at: a claim still held keeps its delivery.
	// It returns each claim's holder, in claims' order.
	TriggerDigestUpsert(ctx context.Context, triggers []string, claims []store.DigestClaim, at, cutoff time.Time) ([]string, error)
}

// TriggerDeliveryListParams are TriggerDeliveryList's.
type TriggerDeliveryListParams struct {
	TriggerID, Delivery string
	AfterN              int64
	AfterID             string
	Limit               int
}

// DeliveryRow is a delivery log line as read, with its number.
type DeliveryRow struct {
	Line store.TriggerDelivery
	N    int64
}
