package storetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

func testTenant(t *testing.T, newStore NewStore) {
	t.Run("CreateGetDefaults", func(t *testing.T) {
		b := setup(t, newStore)
		ten, err := b.s.TenantCreate(b.ctx, store.TenantCreateParams{ID: "acme"})
		require.NoError(t, err)
		require.Equal(t, "acme", ten.ID)
		require.Equal(t, 1, ten.Weight)
		require.Equal(t, agentfleet.ExhaustedQueue, ten.Exhausted)
		require.Equal(t, agentfleet.WindowDay, ten.Window)
		require.Zero(t, ten.TokenLimit)
		require.Equal(t, store.MaxQueuedRunsDefault, ten.MaxQueuedRuns)
		require.False(t, ten.CreatedAt.IsZero())
		require.Equal(t, time.UTC, ten.CreatedAt.Location())
		got, err := b.s.TenantGetByID(b.ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, ten, got)

		full, err := b.s.TenantCreate(b.ctx, store.TenantCreateParams{
			ID: "full_1", TokenLimit: 1000, Window: "24h", TokensPerMinute: 50, MaxConcurrentRuns: 3, MaxQueuedRuns: 40, Weight: 5,
			Exhausted: agentfleet.ExhaustedFail,
		})
		require.NoError(t, err)
		require.Equal(t, agentfleet.Tenant{
			ID: "full_1", TokenLimit: 1000, Window: "24h", TokensPerMinute: 50, MaxConcurrentRuns: 3, MaxQueuedRuns: 40, Weight: 5,
			Exhausted: agentfleet.ExhaustedFail, CreatedAt: full.CreatedAt, UpdatedAt: full.UpdatedAt,
		}, full)
	})
	t.Run("CreateErrors", func(t *testing.T) {
		b := setup(t, newStore)
		b.tenant(t, store.TenantCreateParams{ID: "dup"})
		_, err := b.s.TenantCreate(b.ctx, store.TenantCreateParams{ID: "dup"})
		require.ErrorIs(t, err, store.ErrConflict)
		for name, p := range map[string]store.TenantCreateParams{
			"empty id":        {},
			"id with dot":     {ID: "a.b"},
			"negative limit":  {ID: "x", TokenLimit: -1},
			"bad window":      {ID: "x", Window: "fortnight"},
			"tiny window":     {ID: "x", Window: "1ms"},
			"negative weight": {ID: "x", Weight: -1},
			"bad policy":      {ID: "x", Exhausted: "panic"},
			"negative tpm":    {ID: "x", TokensPerMinute: -5},
			"negative queue":  {ID: "x", MaxQueuedRuns: -1},
		} {
			_, err := b.s.TenantCreate(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err = b.s.TenantGetByID(b.ctx, "nobody")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("DefaultAgent", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		a, err := b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: ten.ID, Name: agentfleet.DefaultAgent})
		require.NoError(t, err)
		require.Equal(t, agentfleet.DefaultAgent, a.Name)
		require.Empty(t, a.Persona)
	})
	t.Run("Update", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 100, Weight: 2})
		up, err := b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](500), MaxConcurrentRuns: ptr(4),
			Exhausted: ptr(agentfleet.ExhaustedFail)})
		require.NoError(t, err)
		require.Equal(t, int64(500), up.TokenLimit)
		require.Equal(t, 4, up.MaxConcurrentRuns)
		require.Equal(t, agentfleet.ExhaustedFail, up.Exhausted)
		require.Equal(t, 2, up.Weight, "unset fields keep their value")
		require.Equal(t, ten.CreatedAt, up.CreatedAt)
		require.False(t, up.UpdatedAt.Before(ten.UpdatedAt))
		got, err := b.s.TenantGetByID(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, up, got)

		up, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, Weight: ptr(0), Window: ptr(agentfleet.BudgetWindow("1h"))})
		require.NoError(t, err)
		require.Equal(t, 1, up.Weight, "zero weight means 1")

		up, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, MaxQueuedRuns: ptr(12)})
		require.NoError(t, err)
		require.Equal(t, 12, up.MaxQueuedRuns)
		require.Equal(t, 1, up.Weight)
		up, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, MaxQueuedRuns: ptr(0)})
		require.NoError(t, err)
		require.Equal(t, store.MaxQueuedRunsDefault, up.MaxQueuedRuns, "zero means the default")
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, MaxQueuedRuns: ptr(-3)})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Equal(t, agentfleet.BudgetWindow("1h"), up.Window)

		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: "nobody", Weight: ptr(3)})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, TokenLimit: ptr[int64](-1)})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.TenantUpdate(b.ctx, store.TenantUpdateParams{ID: ten.ID, Window: ptr(agentfleet.BudgetWindow("soon"))})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
	t.Run("List", func(t *testing.T) {
		b := setup(t, newStore)
		for _, id := range []string{"c", "a", "b"} {
			b.tenant(t, store.TenantCreateParams{ID: id})
		}
		all, err := b.s.TenantList(b.ctx, store.TenantListParams{})
		require.NoError(t, err)
		require.Len(t, all.Tenants, 3)
		require.Empty(t, all.NextCursor)
		two, err := b.s.TenantList(b.ctx, store.TenantListParams{Limit: 2})
		require.NoError(t, err)
		require.Equal(t, all.Tenants[:2], two.Tenants)
		require.NotEmpty(t, two.NextCursor)
	})
	t.Run("ListPages", func(t *testing.T) {
		// Newest first; tenants made in the same microsecond are
		// ordered by id, so a page boundary between them loses none.
		b := setup(t, newStore)
		var want []agentfleet.Tenant
		for i := range 7 {
			want = append(want, b.tenant(t, store.TenantCreateParams{ID: fmt.Sprintf("t%d", i)}))
		}
		slices.SortFunc(want, func(x, y agentfleet.Tenant) int {
			return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), strings.Compare(y.ID, x.ID))
		})
		var got []agentfleet.Tenant
		cursor := ""
		for pages := 1; ; pages++ {
			page, err := b.s.TenantList(b.ctx, store.TenantListParams{Limit: 3, Cursor: cursor})
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Tenants), 3)
			got = append(got, page.Tenants...)
			if page.NextCursor == "" {
				require.Equal(t, 3, pages, "7 tenants, 3 a page")
				break
			}
			cursor = page.NextCursor
		}
		require.Equal(t, want, got)

		_, err := b.s.TenantList(b.ctx, store.TenantListParams{Cursor: "not-a-cursor"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.TenantList(b.ctx, store.TenantListParams{Limit: -1})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.TenantList(b.ctx, store.TenantListParams{Cursor: rules.EncodeCursor(false, 1)})
		require.ErrorIs(t, err, store.ErrInvalid, "a runs cursor is no tenants cursor")
	})
}

func testAPIKey(t *testing.T, newStore NewStore) {
	t.Run("CreateLookup", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		k, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: "sk-secret-1", Name: "ci"})
		require.NoError(t, err)
		require.Regexp(t, `^key_[0-9a-f]{32}$`, k.ID, "a public id, safe in a URL path")
		require.Equal(t, store.APIKey{ID: k.ID, Tenant: ten.ID, Name: "ci", Scopes: store.APIKeyScopes, CreatedAt: k.CreatedAt}, k,
			"a key made without scopes has every one")
		require.False(t, k.CreatedAt.IsZero())
		require.Equal(t, time.UTC, k.CreatedAt.Location())

		now := rules.Time(time.Now().Add(time.Hour))
		got, err := b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "sk-secret-1", Now: now})
		require.NoError(t, err)
		require.Equal(t, ten, got.Tenant)
		k.LastUsedAt = now
		require.Equal(t, k, got.Key, "the key's record, its use recorded")
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "sk-secret-2"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Scopes", func(t *testing.T) {
		// A key's scopes come back from every read in one order, each
		// once, whatever order they were given in.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for key, c := range map[string]struct{ give, want []string }{
			"sk-read":    {[]string{store.ScopeRead}, []string{store.ScopeRead}},
			"sk-sub":     {[]string{store.ScopeRead, store.ScopeSubmit, store.ScopeRead}, []string{store.ScopeSubmit, store.ScopeRead}},
			"sk-admin":   {[]string{store.ScopeAdmin}, []string{store.ScopeAdmin}},
			"sk-all":     {[]string{store.ScopeRead, store.ScopeAdmin, store.ScopeSubmit}, store.APIKeyScopes},
			"sk-default": {nil, store.APIKeyScopes},
		} {
			k, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: key, Name: key, Scopes: c.give})
			require.NoError(t, err, key)
			require.Equal(t, c.want, k.Scopes, key)
			got, err := b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: key})
			require.NoError(t, err, key)
			require.Equal(t, c.want, got.Key.Scopes, "%s: looked up", key)
		}
		list, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, list.Keys, 5)
		for _, k := range list.Keys {
			if k.Name == "sk-read" {
				require.Equal(t, []string{store.ScopeRead}, k.Scopes, "listed")
			}
		}
		_, err = b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: "sk-bad", Scopes: []string{"write"}})
		require.ErrorIs(t, err, store.ErrInvalid, "an unknown scope")
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "sk-bad"})
		require.ErrorIs(t, err, store.ErrNotFound, "a refused key is not stored")
	})
	t.Run("LastUse", func(t *testing.T) {
		// A use is written at most once a minute per key: lookups in
		// between leave it, and report it, as it was.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		k, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: "k"})
		require.NoError(t, err)
		t0 := rules.Time(time.Now())
		lastUsed := func(at time.Time) (looked, listed time.Time) {
			t.Helper()
			got, err := b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "k", Now: at})
			require.NoError(t, err)
			list, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID})
			require.NoError(t, err)
			require.Len(t, list.Keys, 1)
			require.Equal(t, k.ID, list.Keys[0].ID)
			return got.Key.LastUsedAt, list.Keys[0].LastUsedAt
		}
		looked, listed := lastUsed(t0)
		require.Equal(t, t0, looked)
		require.Equal(t, t0, listed)
		looked, listed = lastUsed(t0.Add(30 * time.Second))
		require.Equal(t, t0, looked, "within a minute the use is not written again")
		require.Equal(t, t0, listed)
		t2 := t0.Add(61 * time.Second)
		looked, listed = lastUsed(t2)
		require.Equal(t, t2, looked)
		require.Equal(t, t2, listed)
	})
	t.Run("ListDelete", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		var made []store.APIKey
		for _, name := range []string{"first", "second", "third"} {
			k, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: "key-" + name, Name: name})
			require.NoError(t, err)
			made = append(made, k)
		}
		theirs, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: other.ID, Key: "theirs", Name: "theirs"})
		require.NoError(t, err)

		page, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []store.APIKey{made[2], made[1]}, page.Keys, "newest first")
		require.NotEmpty(t, page.NextCursor)
		rest, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID, Limit: 2, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Equal(t, []store.APIKey{made[0]}, rest.Keys)
		require.Empty(t, rest.NextCursor)
		none, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: unique("nobody")})
		require.NoError(t, err)
		require.Empty(t, none.Keys)

		// Revocation is scoped to the tenant, and at once.
		require.ErrorIs(t, b.s.APIKeyDelete(b.ctx, store.APIKeyDeleteParams{Tenant: ten.ID, ID: theirs.ID}), store.ErrNotFound,
			"another tenant's key")
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "theirs"})
		require.NoError(t, err, "a refused revocation changed nothing")
		require.NoError(t, b.s.APIKeyDelete(b.ctx, store.APIKeyDeleteParams{Tenant: ten.ID, ID: made[1].ID}))
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "key-second"})
		require.ErrorIs(t, err, store.ErrNotFound, "a revoked key is found no more")
		_, err = b.s.TenantGetByAPIKey(b.ctx, store.TenantGetByAPIKeyParams{Key: "key-first"})
		require.NoError(t, err, "the other keys still work")
		require.ErrorIs(t, b.s.APIKeyDelete(b.ctx, store.APIKeyDeleteParams{Tenant: ten.ID, ID: made[1].ID}), store.ErrNotFound,
			"revoking twice")
		require.ErrorIs(t, b.s.APIKeyDelete(b.ctx, store.APIKeyDeleteParams{Tenant: ten.ID, ID: "key_nope"}), store.ErrNotFound)
		all, err := b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, all.Keys, 2)
		require.Equal(t, made[2], all.Keys[0])
		require.Equal(t, made[0].ID, all.Keys[1].ID)
		require.False(t, all.Keys[1].LastUsedAt.IsZero(), "the lookup above was a use")
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.APIKeyCreate(b.ctx, store.APIKeyCreateParams{Tenant: ten.ID, Key: "k1"})
		require.NoError(t, err)
		for name, c := range map[string]struct {
			p    store.APIKeyCreateParams
			want error
		}{
			"duplicate key":  {store.APIKeyCreateParams{Tenant: ten.ID, Key: "k1"}, store.ErrConflict},
			"unknown tenant": {store.APIKeyCreateParams{Tenant: "nobody", Key: "k2"}, store.ErrNotFound},
			"no key":         {store.APIKeyCreateParams{Tenant: ten.ID}, store.ErrInvalid},
			"NUL in name":    {store.APIKeyCreateParams{Tenant: ten.ID, Key: "k3", Name: "a\x00"}, store.ErrInvalid},
			"long name":      {store.APIKeyCreateParams{Tenant: ten.ID, Key: "k3", Name: strings.Repeat("n", 101)}, store.ErrInvalid},
		} {
			_, err := b.s.APIKeyCreate(b.ctx, c.p)
			require.ErrorIs(t, err, c.want, name)
		}
		_, err = b.s.APIKeyList(b.ctx, store.APIKeyListParams{Tenant: ten.ID, Cursor: "bogus!"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.APIKeyList(b.ctx, store.APIKeyListParams{})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

func testMigrate(t *testing.T, opener Opener) {
	open := func(t *testing.T) func(ctx context.Context) (store.Store, error) {
		t.Helper()
		t.Parallel()
		if opener == nil {
			t.Skip("storetest: no Opener given (WithOpener); migration tests need one")
		}
		return opener(t)
	}
	t.Run("Twice", func(t *testing.T) {
		o := open(t)
		ctx := context.Background()
		s1, err := o(ctx)
		require.NoError(t, err)
		_, err = s1.TenantCreate(ctx, store.TenantCreateParams{ID: "kept"})
		require.NoError(t, err)
		require.NoError(t, s1.Close())
		s2, err := o(ctx)
		require.NoError(t, err, "opening a migrated database again")
		defer s2.Close()
		_, err = s2.TenantGetByID(ctx, "kept")
		require.NoError(t, err, "data survives a second open")
	})
	t.Run("Concurrently", func(t *testing.T) {
		o := open(t)
		ctx := context.Background()
		const n = 4
		stores, errs := atOnce(n, func(i int) (store.Store, error) {
			return o(ctx)
		})
		for i := range n {
			require.NoError(t, errs[i], "open %d", i)
			defer stores[i].Close()
		}
		_, err := stores[0].TenantCreate(ctx, store.TenantCreateParams{ID: "shared"})
		require.NoError(t, err)
		for i := 1; i < n; i++ {
			_, err := stores[i].TenantGetByID(ctx, "shared")
			require.NoError(t, err, "store %d sees the one schema", i)
		}
	})
}
