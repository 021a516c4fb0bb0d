package drivertest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

func exerciseTx(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("RollsBackWhole", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		boom := errors.New("boom")
		err := b.Driver.Tx(ctx, func(x driver.Executor) error {
			if _, err := x.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: "a", Spec: []byte(`{}`), Now: now()}); err != nil {
				return err
			}
			if _, err := x.AgentGet(ctx, "t1", "a", 0); err != nil {
				return err // the transaction sees its own write
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		_, err = b.Driver.AgentGet(ctx, "t1", "a", 0)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Commits", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		require.NoError(t, b.Driver.Tx(ctx, func(x driver.Executor) error {
			_, err := x.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: "a", Spec: []byte(`{}`), Now: now()})
			return err
		}))
		_, err := b.Driver.AgentGet(ctx, "t1", "a", 0)
		require.NoError(t, err)
	})
}

func exerciseAgents(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("VersionsNumberOn", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		t0 := now()
		a1, err := b.Driver.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: "a", Spec: []byte(`{"system":"one"}`), Now: t0})
		require.NoError(t, err)
		require.Equal(t, 1, a1.Version)
		require.Equal(t, "one", a1.Persona)
		require.Equal(t, t0, a1.CreatedAt)
		require.Equal(t, t0, a1.UpdatedAt)
		t1 := t0.Add(1e6)
		a2, err := b.Driver.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: "a", Spec: []byte(`{"system":"two"}`), Exists: true, Now: t1})
		require.NoError(t, err)
		require.Equal(t, 2, a2.Version)
		require.Equal(t, t0, a2.CreatedAt, "the agent's creation stays")
		require.Equal(t, t1, a2.UpdatedAt)

		cur, err := b.Driver.AgentGet(ctx, "t1", "a", 0)
		require.NoError(t, err)
		require.Equal(t, a2, cur)
		old, err := b.Driver.AgentGet(ctx, "t1", "a", 1)
		require.NoError(t, err)
		require.Equal(t, a1, old)
	})
	t.Run("DeleteKeepsVersions", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		_, err := b.Driver.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: "a", Spec: []byte(`{}`), Now: now()})
		require.NoError(t, err)
		ok, err := b.Driver.AgentDelete(ctx, "t1", "a")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.Driver.AgentDelete(ctx, "t1", "a")
		require.NoError(t, err)
		require.False(t, ok, "a second delete finds nothing")
		_, err = b.Driver.AgentGet(ctx, "t1", "a", 0)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.Driver.AgentGet(ctx, "t1", "a", 1)
		require.NoError(t, err, "a version outlives its agent")
		_, err = b.Driver.AgentGet(ctx, "t1", "nope", 1)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("ListPages", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1") // has "default"
		t0 := now().Add(1e9)
		for _, name := range []string{"b", "a", "c"} {
			_, err := b.Driver.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{Tenant: "t1", Name: name, Spec: []byte(`{}`), Now: t0})
			require.NoError(t, err)
		}
		names := func(p driver.AgentListParams) []string {
			as, err := b.Driver.AgentList(ctx, p)
			require.NoError(t, err)
			var out []string
			for _, a := range as {
				out = append(out, a.Name)
			}
			return out
		}
		require.Equal(t, []string{"c", "b", "a", "default"}, names(driver.AgentListParams{Tenant: "t1", Limit: 10}))
		require.Equal(t, []string{"c", "b"}, names(driver.AgentListParams{Tenant: "t1", Limit: 2}))
		require.Equal(t, []string{"a", "default"}, names(driver.AgentListParams{Tenant: "t1", Limit: 10,
			After: &driver.AgentPos{CreatedAt: t0, Name: "b"}}))
		require.Empty(t, names(driver.AgentListParams{Tenant: "t2", Limit: 10}))
	})
}
