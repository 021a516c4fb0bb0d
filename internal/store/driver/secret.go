package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// SecretExecutor stores tenants' named secrets, and reads and reseals
// every sealed value the store keeps (a rekey). It never sees a value in
// clear.
type SecretExecutor interface {
	// SecretUpsert inserts a tenant's secret at version 1, created and
	// updated at now, or replaces all of it but created_at, one version
	// on. An unknown tenant is store.ErrNotFound. p is stored as given.
	SecretUpsert(ctx context.Context, p store.SecretPutParams, now time.Time) (agentfleet.Secret, error)
	SecretGet(ctx context.Context, tenant, name string) (agentfleet.Secret, error)
	// SecretList reads a tenant's secrets by name (bytewise).
	SecretList(ctx context.Context, tenant string) ([]agentfleet.Secret, error)
	// SecretDelete deletes a tenant's secret and reports whether there
	// was one.
	SecretDelete(ctx context.Context, tenant, name string) (bool, error)
	// SecretSealedList reads a tenant's secrets' sealed values by name.
	SecretSealedList(ctx context.Context, tenant string) ([]store.SealedSecret, error)

	// SealedList reads up to limit non-empty sealed values of one kind
	// after (owner, name), in (owner, name) order (bytewise; ("", "")
	// for the first). A kind without names has Name "". An unknown kind
	// is store.ErrInvalid.
	SealedList(ctx context.Context, kind store.SealedKind, owner, name string, limit int) ([]store.Sealed, error)
	// SealedGet reads the sealed value at ref ("" for a trigger with no
	// previous secret); a missing row is store.ErrNotFound.
	SealedGet(ctx context.Context, ref store.SealedRef) (string, error)
	// SealedReplace sets the value at p.Ref to p.New where it is p.Old
	// (and a secret's key_id to p.KeyID), touching nothing else, and
	// reports whether it did.
	SealedReplace(ctx context.Context, p store.SealedReplaceParams) (bool, error)
}
