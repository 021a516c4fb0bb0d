package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func exerciseSecrets(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	put := func(t *testing.T, b Backend, tenant, name, sealed string, at time.Time) agentfleet.Secret {
		t.Helper()
		x, err := b.Driver.SecretUpsert(ctx, store.SecretPutParams{Tenant: tenant, Name: name, Sealed: sealed, KeyID: "k1",
			Hosts: []string{"api.example.com", "*.example.org"}, Header: "Authorization", Format: "Bearer {value}"}, at)
		require.NoError(t, err)
		return x
	}
	t.Run("UpsertGetListDelete", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		tenant(t, b, "t2")
		at := now()
		x := put(t, b, "t1", "gh", "sealed-1", at)
		require.Equal(t, agentfleet.Secret{Tenant: "t1", Name: "gh", Hosts: []string{"api.example.com", "*.example.org"},
			Header: "Authorization", Format: "Bearer {value}", Version: 1, KeyID: "k1", CreatedAt: at, UpdatedAt: at}, x)

		later := at.Add(time.Second)
		x, err := b.Driver.SecretUpsert(ctx, store.SecretPutParams{Tenant: "t1", Name: "gh", Sealed: "sealed-2", KeyID: "k2",
			Hosts: []string{"h.example.com"}, Header: "X-Key", Format: "{value}", Expose: true}, later)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Secret{Tenant: "t1", Name: "gh", Hosts: []string{"h.example.com"}, Header: "X-Key", Format: "{value}",
			Expose: true, Version: 2, KeyID: "k2", CreatedAt: at, UpdatedAt: later}, x, "replaced whole, one version on, created kept")
		got, err := b.Driver.SecretGet(ctx, "t1", "gh")
		require.NoError(t, err)
		require.Equal(t, x, got)
		_, err = b.Driver.SecretGet(ctx, "t2", "gh")
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's")
		_, err = b.Driver.SecretUpsert(ctx, store.SecretPutParams{Tenant: "nobody", Name: "gh", Sealed: "s", KeyID: "k1",
			Hosts: []string{"h.example.com"}, Header: "A", Format: "{value}"}, at)
		require.ErrorIs(t, err, store.ErrNotFound, "an unknown tenant")

		put(t, b, "t1", "ab", "sealed-ab", at)
		put(t, b, "t1", "a_b", "sealed-a_b", at)
		put(t, b, "t2", "zz", "sealed-zz", at)
		xs, err := b.Driver.SecretList(ctx, "t1")
		require.NoError(t, err)
		var names []string
		for _, x := range xs {
			names = append(names, x.Name)
		}
		require.Equal(t, []string{"a_b", "ab", "gh"}, names, "by name, bytewise")
		sealed, err := b.Driver.SecretSealedList(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, []store.SealedSecret{{Tenant: "t1", Name: "a_b", Sealed: "sealed-a_b", KeyID: "k1"},
			{Tenant: "t1", Name: "ab", Sealed: "sealed-ab", KeyID: "k1"}, {Tenant: "t1", Name: "gh", Sealed: "sealed-2", KeyID: "k2"}}, sealed)
		xs, err = b.Driver.SecretList(ctx, "t3")
		require.NoError(t, err)
		require.Empty(t, xs)

		ok, err := b.Driver.SecretDelete(ctx, "t2", "gh")
		require.NoError(t, err)
		require.False(t, ok, "another tenant's")
		ok, err = b.Driver.SecretDelete(ctx, "t1", "gh")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = b.Driver.SecretGet(ctx, "t1", "gh")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Sealed", func(t *testing.T) {
		b := open(t)
		// Owners that sort differently bytewise and in a locale's order.
		for _, id := range []string{"t-b", "ta", "Tz"} {
			tenant(t, b, id)
			require.NoError(t, b.Driver.CallbackSecretUpsert(ctx, id, "cb-"+id, now()))
		}
		at := now()
		x := put(t, b, "ta", "ab", "s-ab", at)
		put(t, b, "ta", "a_b", "s-a_b", at)
		put(t, b, "t-b", "zz", "s-zz", at)
		for _, id := range []string{"tra", "tr-b"} {
			_, err := b.Driver.TriggerInsert(ctx, store.TriggerCreateParams{ID: id, Tenant: "ta", Agent: "default", Scheme: "hmac",
				Secret: "tr-" + id}, at)
			require.NoError(t, err)
		}
		next := "tr-tra-2"
		_, err := b.Driver.TriggerUpdate(ctx, store.TriggerUpdateParams{ID: "tra", Tenant: "ta", Secret: &next}, at.Add(time.Hour), at)
		require.NoError(t, err)

		list := func(kind store.SealedKind, owner, name string, limit int) []store.Sealed {
			t.Helper()
			got, err := b.Driver.SealedList(ctx, kind, owner, name, limit)
			require.NoError(t, err)
			return got
		}
		ref := func(kind store.SealedKind, owner, name, sealed string) store.Sealed {
			return store.Sealed{Ref: store.SealedRef{Kind: kind, Owner: owner, Name: name}, Sealed: sealed}
		}
		require.Equal(t, []store.Sealed{ref(store.SealedCallbackValue, "Tz", "", "cb-Tz"), ref(store.SealedCallbackValue, "t-b", "", "cb-t-b"),
			ref(store.SealedCallbackValue, "ta", "", "cb-ta")}, list(store.SealedCallbackValue, "", "", 10))
		require.Equal(t, []store.Sealed{ref(store.SealedCallbackValue, "ta", "", "cb-ta")}, list(store.SealedCallbackValue, "t-b", "", 10))
		require.Empty(t, list(store.SealedSecretValue, "ta", "ab", 10), "after the last")
		require.Equal(t, []store.Sealed{ref(store.SealedSecretValue, "t-b", "zz", "s-zz"), ref(store.SealedSecretValue, "ta", "a_b", "s-a_b")},
			list(store.SealedSecretValue, "", "", 2))
		require.Equal(t, []store.Sealed{ref(store.SealedSecretValue, "ta", "ab", "s-ab")}, list(store.SealedSecretValue, "ta", "a_b", 2))
		require.Equal(t, []store.Sealed{ref(store.SealedTrigger, "tr-b", "", "tr-tr-b"), ref(store.SealedTrigger, "tra", "", "tr-tra-2")},
			list(store.SealedTrigger, "", "", 10))
		require.Equal(t, []store.Sealed{ref(store.SealedTriggerPrev, "tra", "", "tr-tra")}, list(store.SealedTriggerPrev, "", "", 10),
			"only triggers with a previous secret")
		_, err = b.Driver.SealedList(ctx, "nothing", "", "", 10)
		require.ErrorIs(t, err, store.ErrInvalid)

		for _, c := range []struct {
			ref      store.SealedRef
			old, new string
		}{
			{store.SealedRef{Kind: store.SealedCallbackValue, Owner: "ta"}, "cb-ta", "cb-ta-2"},
			{store.SealedRef{Kind: store.SealedSecretValue, Owner: "ta", Name: "ab"}, "s-ab", "s-ab-2"},
			{store.SealedRef{Kind: store.SealedTrigger, Owner: "tra"}, "tr-tra-2", "tr-tra-3"},
			{store.SealedRef{Kind: store.SealedTriggerPrev, Owner: "tra"}, "tr-tra", "tr-tra-1"},
		} {
			ok, err := b.Driver.SealedReplace(ctx, store.SealedReplaceParams{Ref: c.ref, Old: c.new, New: "x", KeyID: "k9"})
			require.NoError(t, err)
			require.False(t, ok, "%s: not the value kept", c.ref.Kind)
			ok, err = b.Driver.SealedReplace(ctx, store.SealedReplaceParams{Ref: c.ref, Old: c.old, New: c.new, KeyID: "k9"})
			require.NoError(t, err)
			require.True(t, ok, c.ref.Kind)
			got, err := b.Driver.SealedGet(ctx, c.ref)
			require.NoError(t, err)
			require.Equal(t, c.new, got, c.ref.Kind)
		}
		cb, err := b.Driver.CallbackSecretGet(ctx, "ta")
		require.NoError(t, err)
		require.Equal(t, "cb-ta-2", cb)
		tr, err := b.Driver.TriggerGet(ctx, "tra", "ta")
		require.NoError(t, err)
		require.Equal(t, "tr-tra-3", tr.Secret)
		require.Equal(t, "tr-tra-1", tr.PrevSecret)
		require.Equal(t, at, tr.UpdatedAt, "a reseal is not an update")
		got, err := b.Driver.SecretGet(ctx, "ta", "ab")
		require.NoError(t, err)
		x.KeyID = "k9"
		require.Equal(t, x, got, "the key id changes, not the version nor the times")
		sealed, err := b.Driver.SecretSealedList(ctx, "ta")
		require.NoError(t, err)
		require.Equal(t, store.SealedSecret{Tenant: "ta", Name: "ab", Sealed: "s-ab-2", KeyID: "k9"}, sealed[1])

		_, err = b.Driver.SealedGet(ctx, store.SealedRef{Kind: store.SealedSecretValue, Owner: "ta", Name: "none"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.SealedGet(ctx, store.SealedRef{Kind: store.SealedTrigger, Owner: "none"})
		require.ErrorIs(t, err, store.ErrNotFound)
		prev, err := b.Driver.SealedGet(ctx, store.SealedRef{Kind: store.SealedTriggerPrev, Owner: "tr-b"})
		require.NoError(t, err)
		require.Empty(t, prev, "a trigger without a previous secret")
	})
}
