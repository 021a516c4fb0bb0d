package storetest

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// secretPut is a valid put of a secret, for tests to vary.
func secretPut(tenant, name string) store.SecretPutParams {
	return store.SecretPutParams{Tenant: tenant, Name: name, Sealed: "v2:k1:sealed-" + name, KeyID: "k1", Hosts: []string{"api.github.com"}}
}

func testSecret(t *testing.T, newStore NewStore) {
	t.Run("PutReplace", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		p := secretPut(ten.ID, "github_token")
		p.Hosts = []string{"API.GitHub.com", "*.githubusercontent.com", "api.github.com"}
		x, err := b.s.SecretPut(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Secret{Tenant: ten.ID, Name: "github_token", Hosts: []string{"api.github.com", "*.githubusercontent.com"},
			Header: agentfleet.SecretHeaderDefault, Format: agentfleet.SecretFormatDefault, Version: 1, KeyID: "k1",
			CreatedAt: x.CreatedAt, UpdatedAt: x.CreatedAt}, x, "hosts lower-cased once each; header and format defaulted")
		require.Equal(t, time.UTC, x.CreatedAt.Location())
		raw, err := json.Marshal(x)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "sealed-github_token", "a secret as shown holds no value")

		p = store.SecretPutParams{Tenant: ten.ID, Name: "github_token", Sealed: "v2:k2:other", KeyID: "k2", Hosts: []string{"uploads.github.com"},
			Header: "X-Api-Key", Format: "{value}", Expose: true}
		y, err := b.s.SecretPut(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Secret{Tenant: ten.ID, Name: "github_token", Hosts: []string{"uploads.github.com"}, Header: "X-Api-Key",
			Format: "{value}", Expose: true, Version: 2, KeyID: "k2", CreatedAt: x.CreatedAt, UpdatedAt: y.UpdatedAt}, y)
		require.False(t, y.UpdatedAt.Before(x.UpdatedAt))
		got, err := b.s.SecretGet(b.ctx, ten.ID, "github_token")
		require.NoError(t, err)
		require.Equal(t, y, got)
		y3, err := b.s.SecretPut(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, 3, y3.Version, "every put is a write, the same value too")

		sealed, err := b.s.SecretSealedList(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, []store.SealedSecret{{Tenant: ten.ID, Name: "github_token", Sealed: "v2:k2:other", KeyID: "k2"}}, sealed)
	})
	t.Run("ListGetDelete", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		empty := b.tenant(t, store.TenantCreateParams{})
		var want []agentfleet.Secret
		for _, name := range []string{"zeta", "a_b", "ab", "a1"} {
			x, err := b.s.SecretPut(b.ctx, secretPut(ten.ID, name))
			require.NoError(t, err)
			want = append(want, x)
		}
		slices.SortFunc(want, func(a, b agentfleet.Secret) int { return strings.Compare(a.Name, b.Name) })
		list, err := b.s.SecretList(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, want, list, "by name, bytewise")
		list, err = b.s.SecretList(b.ctx, empty.ID)
		require.NoError(t, err)
		require.Empty(t, list)
		sealed, err := b.s.SecretSealedList(b.ctx, empty.ID)
		require.NoError(t, err)
		require.Empty(t, sealed)

		_, err = b.s.SecretList(b.ctx, "nobody")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SecretPut(b.ctx, secretPut("nobody", "x"))
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SecretGet(b.ctx, ten.ID, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.SecretDelete(b.ctx, ten.ID, "nope"), store.ErrNotFound)

		require.NoError(t, b.s.SecretDelete(b.ctx, ten.ID, "ab"))
		_, err = b.s.SecretGet(b.ctx, ten.ID, "ab")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.SecretDelete(b.ctx, ten.ID, "ab"), store.ErrNotFound)
		x, err := b.s.SecretPut(b.ctx, secretPut(ten.ID, "ab"))
		require.NoError(t, err)
		require.Equal(t, 1, x.Version, "a deleted secret starts again")
	})
	t.Run("TenantIsolation", func(t *testing.T) {
		b := setup(t, newStore)
		t1 := b.tenant(t, store.TenantCreateParams{})
		t2 := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.SecretPut(b.ctx, secretPut(t1.ID, "shared"))
		require.NoError(t, err)
		_, err = b.s.SecretGet(b.ctx, t2.ID, "shared")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.SecretDelete(b.ctx, t2.ID, "shared"), store.ErrNotFound)
		p := secretPut(t2.ID, "shared")
		p.Sealed = "v2:k1:t2's"
		x, err := b.s.SecretPut(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, 1, x.Version, "the same name in another tenant is another secret")
		for ten, sealed := range map[string]string{t1.ID: "v2:k1:sealed-shared", t2.ID: "v2:k1:t2's"} {
			got, err := b.s.SecretSealedList(b.ctx, ten)
			require.NoError(t, err)
			require.Equal(t, []store.SealedSecret{{Tenant: ten, Name: "shared", Sealed: sealed, KeyID: "k1"}}, got)
		}
		require.NoError(t, b.s.SecretDelete(b.ctx, t1.ID, "shared"))
		_, err = b.s.SecretGet(b.ctx, t2.ID, "shared")
		require.NoError(t, err)
	})
	t.Run("Invalid", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for _, c := range []struct {
			field string
			edit  func(p *store.SecretPutParams)
		}{
			{"tenant", func(p *store.SecretPutParams) { p.Tenant = "" }},
			{"name", func(p *store.SecretPutParams) { p.Name = "" }},
			{"name", func(p *store.SecretPutParams) { p.Name = "GitHub" }},
			{"name", func(p *store.SecretPutParams) { p.Name = "a-b" }},
			{"name", func(p *store.SecretPutParams) { p.Name = strings.Repeat("a", 65) }},
			{"sealed", func(p *store.SecretPutParams) { p.Sealed = "" }},
			{"key id", func(p *store.SecretPutParams) { p.KeyID = "" }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = nil }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = slices.Repeat([]string{"a.example.com"}, 33) }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"https://api.github.com"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"api.github.com:443"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"api.github.com/repos"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{""} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"a..b"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"-a.example.com"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"api.github.com."} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"*.com"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"a.*.example.com"} }},
			{"hosts", func(p *store.SecretPutParams) { p.Hosts = []string{"*"} }},
			{"header", func(p *store.SecretPutParams) { p.Header = "X Key" }},
			{"header", func(p *store.SecretPutParams) { p.Header = "X-Key:" }},
			{"header", func(p *store.SecretPutParams) { p.Header = "X-Key\r\nEvil" }},
			{"format", func(p *store.SecretPutParams) { p.Format = "Bearer value" }},
			{"format", func(p *store.SecretPutParams) { p.Format = "{value}\r\nX-Evil: 1" }},
			{"format", func(p *store.SecretPutParams) { p.Format = "{value}\x00" }},
		} {
			p := secretPut(ten.ID, "good")
			c.edit(&p)
			_, err := b.s.SecretPut(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, "%s: %+v", c.field, p)
			require.Contains(t, err.Error(), c.field, "the error names the field")
		}
		_, err := b.s.SecretGet(b.ctx, ten.ID, "Bad-Name")
		require.ErrorIs(t, err, store.ErrInvalid)
		require.ErrorIs(t, b.s.SecretDelete(b.ctx, "", "x"), store.ErrInvalid)
		list, err := b.s.SecretList(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Empty(t, list, "nothing invalid was stored")

		p := secretPut(ten.ID, "good")
		p.Hosts = []string{"localhost", "10.0.0.1", "*.a.example.com", "x-1.example.com"}
		_, err = b.s.SecretPut(b.ctx, p)
		require.NoError(t, err, "bare host names, a wildcard below a domain")
	})
	t.Run("SealedListReplace", func(t *testing.T) {
		b := setup(t, newStore)
		var want []store.Sealed
		add := func(kind store.SealedKind, owner, name, sealed string) {
			want = append(want, store.Sealed{Ref: store.SealedRef{Kind: kind, Owner: owner, Name: name}, Sealed: sealed})
		}
		var triggers []string
		for i := range 2 {
			ten := b.tenant(t, store.TenantCreateParams{})
			require.NoError(t, b.s.TenantCallbackSecretSet(b.ctx, store.TenantCallbackSecretSetParams{Tenant: ten.ID, Secret: "cb-" + ten.ID}))
			add(store.SealedCallbackValue, ten.ID, "", "cb-"+ten.ID)
			for _, name := range []string{"b", "a"} {
				p := secretPut(ten.ID, name)
				_, err := b.s.SecretPut(b.ctx, p)
				require.NoError(t, err)
				add(store.SealedSecretValue, ten.ID, name, p.Sealed)
			}
			tr, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Scheme: "hmac", Secret: "tr-1"})
			require.NoError(t, err)
			add(store.SealedTrigger, tr.ID, "", "tr-1")
			triggers = append(triggers, tr.ID)
			if i == 0 { // only one trigger has a previous secret
				next := "tr-2"
				_, err = b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{ID: tr.ID, Tenant: ten.ID, Secret: &next,
					PrevSecretUntil: time.Now().Add(time.Hour)})
				require.NoError(t, err)
				want[len(want)-1].Sealed = "tr-2"
				add(store.SealedTriggerPrev, tr.ID, "", "tr-1")
			}
		}
		slices.SortFunc(want, func(a, b store.Sealed) int {
			return cmp.Or(cmp.Compare(a.Ref.Kind, b.Ref.Kind), cmp.Compare(a.Ref.Owner, b.Ref.Owner), cmp.Compare(a.Ref.Name, b.Ref.Name))
		})
		walk := func(limit int) []store.Sealed {
			t.Helper()
			var all []store.Sealed
			var after store.SealedRef
			for range 100 {
				page, err := b.s.SealedList(b.ctx, store.SealedListParams{After: after, Limit: limit})
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), cmp.Or(limit, 100))
				if len(page) == 0 {
					return all
				}
				all = append(all, page...)
				after = page[len(page)-1].Ref
			}
			t.Fatal("the walk does not end")
			return nil
		}
		require.Len(t, want, 9)
		require.Equal(t, want, walk(2), "every kind, in (kind, owner, name) order, across pages")
		require.Equal(t, want, walk(0), "the default page")

		// Reseal each: a stale Old changes nothing.
		for _, s := range want {
			p := store.SealedReplaceParams{Ref: s.Ref, Old: s.Sealed + "-stale", New: s.Sealed + "-new", KeyID: "k2"}
			require.ErrorIs(t, b.s.SealedReplace(b.ctx, p), store.ErrConflict, s.Ref)
			p.Old = s.Sealed
			require.NoError(t, b.s.SealedReplace(b.ctx, p), s.Ref)
			require.ErrorIs(t, b.s.SealedReplace(b.ctx, p), store.ErrConflict, "%v: Old is not kept any more", s.Ref)
		}
		got := walk(3)
		for i := range want {
			want[i].Sealed += "-new"
		}
		require.Equal(t, want, got)
		x, err := b.s.SecretGet(b.ctx, want[2].Ref.Owner, want[2].Ref.Name)
		require.NoError(t, err)
		require.Equal(t, "k2", x.KeyID, "a secret's key id follows its value")
		require.Equal(t, 1, x.Version, "a reseal is not a write of the secret")
		tr, err := b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: triggers[0]})
		require.NoError(t, err)
		require.Equal(t, "tr-2-new", tr.Secret)
		require.Equal(t, "tr-1-new", tr.PrevSecret)
		cb, err := b.s.TenantCallbackSecretGet(b.ctx, want[0].Ref.Owner)
		require.NoError(t, err)
		require.Equal(t, want[0].Sealed, cb)

		require.ErrorIs(t, b.s.SealedReplace(b.ctx, store.SealedReplaceParams{
			Ref: store.SealedRef{Kind: store.SealedSecretValue, Owner: want[2].Ref.Owner, Name: "gone"}, Old: "a", New: "b", KeyID: "k2",
		}), store.ErrNotFound)
		require.ErrorIs(t, b.s.SealedReplace(b.ctx, store.SealedReplaceParams{
			Ref: store.SealedRef{Kind: store.SealedTrigger, Owner: "no-such-trigger"}, Old: "a", New: "b",
		}), store.ErrNotFound)
		for _, p := range []store.SealedReplaceParams{
			{Ref: store.SealedRef{Kind: "nothing", Owner: "x"}, Old: "a", New: "b"},
			{Ref: store.SealedRef{Kind: store.SealedTrigger}, Old: "a", New: "b"},
			{Ref: store.SealedRef{Kind: store.SealedTrigger, Owner: "x", Name: "y"}, Old: "a", New: "b"},
			{Ref: store.SealedRef{Kind: store.SealedSecretValue, Owner: "x"}, Old: "a", New: "b", KeyID: "k"},
			{Ref: store.SealedRef{Kind: store.SealedSecretValue, Owner: "x", Name: "y"}, Old: "a", New: "b"},
			{Ref: store.SealedRef{Kind: store.SealedTrigger, Owner: "x"}, Old: "a"},
		} {
			require.ErrorIs(t, b.s.SealedReplace(b.ctx, p), store.ErrInvalid, "%+v", p)
		}
		for _, p := range []store.SealedListParams{{Limit: -1}, {Limit: 100_000}, {After: store.SealedRef{Kind: "nothing"}}} {
			_, err := b.s.SealedList(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, "%+v", p)
		}
	})
}
