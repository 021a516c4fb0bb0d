package maintain

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// rekeyStores open a store of each backend, with the tenant acme.
var rekeyStores = map[string]func(t *testing.T) store.Store{
	"sqlite": func(t *testing.T) store.Store { return openTestStore(t) },
	"postgres": func(t *testing.T) store.Store {
		st := pgtest.Open(t)
		_, err := st.TenantCreate(t.Context(), store.TenantCreateParams{ID: "acme"})
		require.NoError(t, err)
		return st
	},
}

func mustBox(t *testing.T, cur string, prev ...string) *secrets.Box {
	t.Helper()
	p := ""
	for i, k := range prev {
		if i > 0 {
			p += ","
		}
		p += k
	}
	b, err := secrets.ParseKeys(cur, p)
	require.NoError(t, err)
	return b
}

func putSecret(t *testing.T, st store.Store, box *secrets.Box, tenant, name, value string) {
	t.Helper()
	sealed, err := box.Seal(value, secrets.SecretAD(tenant, name))
	require.NoError(t, err)
	_, err = st.SecretPut(t.Context(), store.SecretPutParams{Tenant: tenant, Name: name, Sealed: sealed, KeyID: box.KeyID(), Hosts: []string{"api.example.com"}})
	require.NoError(t, err)
}

// sealedValues is every sealed value of st, by where it is kept.
func sealedValues(t *testing.T, st store.Store) map[store.SealedRef]string {
	t.Helper()
	out := map[store.SealedRef]string{}
	var after store.SealedRef
	for {
		page, err := st.SealedList(t.Context(), store.SealedListParams{After: after, Limit: 2})
		require.NoError(t, err)
		for _, v := range page {
			out[v.Ref] = v.Sealed
			after = v.Ref
		}
		if len(page) < 2 {
			return out
		}
	}
}

// Rekey reseals every kind of value under the current key with the
// associated data of where it is kept, pages past the page size, leaves
// current values alone, and reports (and keeps) what no key opens.
func TestRekey(t *testing.T) {
	t.Parallel()
	for name, open := range rekeyStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRekey(t, open(t))
		})
	}
}

func testRekey(t *testing.T, st store.Store) {
	ctx := t.Context()
	oldKey, newKey := secrets.NewKey(), secrets.NewKey()
	old := mustBox(t, oldKey)
	plain := map[store.SealedRef]string{}
	for i := range rekeyPage + 3 {
		name := fmt.Sprintf("s%03d", i)
		putSecret(t, st, old, "acme", name, "value-"+name)
		plain[store.SealedRef{Kind: store.SealedSecretValue, Owner: "acme", Name: name}] = "value-" + name
	}
	cb, err := old.Seal("whsec_cb", CallbackSecretAD("acme"))
	require.NoError(t, err)
	require.NoError(t, st.TenantCallbackSecretSet(ctx, store.TenantCallbackSecretSetParams{Tenant: "acme", Secret: cb}))
	plain[store.SealedRef{Kind: store.SealedCallbackValue, Owner: "acme"}] = "whsec_cb"
	tsec, err := old.Seal("trigger-secret", "trg_1")
	require.NoError(t, err)
	_, err = st.TriggerCreate(ctx, store.TriggerCreateParams{ID: "trg_1", Tenant: "acme", Name: "t", Agent: "default", Scheme: "github", Secret: tsec, Enabled: true})
	require.NoError(t, err)
	plain[store.SealedRef{Kind: store.SealedTrigger, Owner: "trg_1"}] = "trigger-secret"
	// Sealed under a key the new box does not hold.
	putSecret(t, st, mustBox(t, secrets.NewKey()), "acme", "lost", "gone")

	box := mustBox(t, newKey, oldKey)
	res, err := Rekey(ctx, st, box)
	require.NoError(t, err)
	require.Equal(t, len(plain), res.Rewritten)
	require.Zero(t, res.Current)
	require.Equal(t, []store.SealedRef{{Kind: store.SealedSecretValue, Owner: "acme", Name: "lost"}}, res.Unopened)

	only := mustBox(t, newKey)
	after := sealedValues(t, st)
	for ref, want := range plain {
		require.True(t, only.Current(after[ref]), "%v is under the new key", ref)
		ad, _ := SealedAD(ref)
		got, err := only.Open(after[ref], ad)
		require.NoError(t, err, "%v opens with the new key alone", ref)
		require.Equal(t, want, got)
	}
	sec, err := st.SecretGet(ctx, "acme", "s000")
	require.NoError(t, err)
	require.Equal(t, box.KeyID(), sec.KeyID, "the secret's key id follows its value")

	again, err := Rekey(ctx, st, box)
	require.NoError(t, err)
	require.Zero(t, again.Rewritten)
	require.Equal(t, len(plain), again.Current)
	require.Len(t, again.Unopened, 1, "still reported, still kept")

	_, err = Rekey(ctx, st, nil)
	require.ErrorIs(t, err, secrets.ErrNoKey)
}

// racingStore writes a secret between Rekey's read of it and its
// replace, as another dispatcher might.
type racingStore struct {
	store.Store
	race func()
}

func (s *racingStore) SealedReplace(ctx context.Context, p store.SealedReplaceParams) error {
	if s.race != nil {
		race := s.race
		s.race = nil
		race()
	}
	return s.Store.SealedReplace(ctx, p)
}

// A value changed meanwhile is read again, not lost: written under the
// current key it is left; written under an old key it is resealed;
// deleted it is skipped.
func TestRekeyConflict(t *testing.T) {
	t.Parallel()
	for name, open := range rekeyStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRekeyConflict(t, open)
		})
	}
}

func testRekeyConflict(t *testing.T, open func(t *testing.T) store.Store) {
	oldKey, newKey := secrets.NewKey(), secrets.NewKey()
	old, box := mustBox(t, oldKey), mustBox(t, newKey, oldKey)
	for _, c := range []struct {
		name          string
		race          func(st store.Store)
		want          string
		rewritten, cu int
	}{
		{"current", func(st store.Store) { putSecret(t, st, box, "acme", "tok", "v2") }, "v2", 0, 1},
		{"old", func(st store.Store) { putSecret(t, st, old, "acme", "tok", "v3") }, "v3", 1, 0},
		{"deleted", func(st store.Store) { require.NoError(t, st.SecretDelete(t.Context(), "acme", "tok")) }, "", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := open(t)
			putSecret(t, st, old, "acme", "tok", "v1")
			rs := &racingStore{Store: st}
			rs.race = func() { c.race(st) }
			res, err := Rekey(t.Context(), rs, box)
			require.NoError(t, err)
			require.Equal(t, c.rewritten, res.Rewritten)
			require.Equal(t, c.cu, res.Current)
			require.Empty(t, res.Unopened)
			got := sealedValues(t, st)
			ref := store.SealedRef{Kind: store.SealedSecretValue, Owner: "acme", Name: "tok"}
			if c.want == "" {
				require.NotContains(t, got, ref)
				return
			}
			require.True(t, box.Current(got[ref]))
			v, err := box.Open(got[ref], secrets.SecretAD("acme", "tok"))
			require.NoError(t, err)
			require.Equal(t, c.want, v, "the value written meanwhile, not the one read first")
		})
	}
}
