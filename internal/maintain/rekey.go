package maintain

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
)

// rekeyPage is how many sealed values a rekey reads at a time, and
// rekeyRetries how often it re-reads one that changed under it.
const (
	rekeyPage    = 100
	rekeyRetries = 5
)

// RekeyResult says what Rekey did: Rewritten values were sealed again
// under the current key, Current ones were under it already, Unopened
// ones open under no key the box holds and were left as they are.
type RekeyResult struct {
	Rewritten, Current int
	Unopened           []store.SealedRef
}

// SealedAD is the associated data a sealed value is bound to where it is
// kept, by kind; false for a kind this package does not know.
func SealedAD(ref store.SealedRef) (string, bool) {
	switch ref.Kind {
	case store.SealedSecretValue:
		return secrets.SecretAD(ref.Owner, ref.Name), true
	case store.SealedTrigger, store.SealedTriggerPrev:
		return ref.Owner, true
	case store.SealedCallbackValue:
		return CallbackSecretAD(ref.Owner), true
	}
	return "", false
}

// Rekey seals every value the store keeps that is not under box's
// current key again under it, with the same associated data. A value
// changed meanwhile (SealedReplace's ErrConflict) is read again and
// handled as it is now; one deleted meanwhile is skipped. It may run
// while the fleet serves, and again after a failure: what it already
// rewrote is current.
func Rekey(ctx context.Context, st store.Store, box *secrets.Box) (RekeyResult, error) {
	var res RekeyResult
	if box == nil {
		return res, secrets.ErrNoKey
	}
	var after store.SealedRef
	for {
		page, err := st.SealedList(ctx, store.SealedListParams{After: after, Limit: rekeyPage})
		if err != nil {
			return res, fmt.Errorf("rekey: list sealed values: %w", err)
		}
		for _, v := range page {
			if err := rekeyOne(ctx, st, box, after, v, &res); err != nil {
				return res, err
			}
			after = v.Ref
		}
		if len(page) < rekeyPage {
			return res, nil
		}
	}
}

// rekeyOne reseals v, which follows prev in the store's order.
func rekeyOne(ctx context.Context, st store.Store, box *secrets.Box, prev store.SealedRef, v store.Sealed, res *RekeyResult) error {
	for range rekeyRetries {
		if box.Current(v.Sealed) {
			res.Current++
			return nil
		}
		ad, ok := SealedAD(v.Ref)
		if !ok {
			res.Unopened = append(res.Unopened, v.Ref)
			return nil
		}
		plain, err := box.Open(v.Sealed, ad)
		if err != nil {
			res.Unopened = append(res.Unopened, v.Ref)
			return nil
		}
		sealed, err := box.Seal(plain, ad)
		if err != nil {
			return fmt.Errorf("rekey: seal %s: %w", refString(v.Ref), err)
		}
		err = st.SealedReplace(ctx, store.SealedReplaceParams{Ref: v.Ref, Old: v.Sealed, New: sealed, KeyID: box.KeyID()})
		if err == nil {
			res.Rewritten++
			return nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("rekey: replace %s: %w", refString(v.Ref), err)
		}
		// Changed (or deleted) since it was read: read it again.
		again, err := st.SealedList(ctx, store.SealedListParams{After: prev, Limit: 1})
		if err != nil {
			return fmt.Errorf("rekey: read %s again: %w", refString(v.Ref), err)
		}
		if len(again) == 0 || again[0].Ref != v.Ref {
			return nil // deleted meanwhile
		}
		v = again[0]
	}
	return fmt.Errorf("rekey: %s changed %d times while it was resealed; run the rekey again", refString(v.Ref), rekeyRetries)
}

func refString(r store.SealedRef) string {
	if r.Name != "" {
		return fmt.Sprintf("%s %s/%s", r.Kind, r.Owner, r.Name)
	}
	return fmt.Sprintf("%s %s", r.Kind, r.Owner)
}
