package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func exerciseSkills(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	t.Run("UpsertGetListDelete", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		tenant(t, b, "t2")
		at := now()
		x, err := b.Driver.SkillUpsert(ctx, store.SkillPutParams{Tenant: "t1", Name: "b", Description: "d", Body: "# b",
			Agents: []string{"x", "y"}, Source: agentfleet.SkillSourceImported}, at)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Skill{Tenant: "t1", Name: "b", Description: "d", Body: "# b", Agents: []string{"x", "y"},
			Source: agentfleet.SkillSourceImported, CreatedAt: at, UpdatedAt: at}, x)
		later := at.Add(time.Second)
		x, err = b.Driver.SkillUpsert(ctx, store.SkillPutParams{Tenant: "t1", Name: "b", Description: "d2", Body: "# b2",
			Agents: []string{}, Source: agentfleet.SkillSourceCompiled, SourceRun: "run_1"}, later)
		require.NoError(t, err)
		require.Equal(t, agentfleet.Skill{Tenant: "t1", Name: "b", Description: "d2", Body: "# b2", Agents: []string{},
			Source: agentfleet.SkillSourceCompiled, SourceRun: "run_1", CreatedAt: at, UpdatedAt: later}, x, "replaced whole, created kept")
		got, err := b.Driver.SkillGet(ctx, "t1", "b")
		require.NoError(t, err)
		require.Equal(t, x, got)
		_, err = b.Driver.SkillGet(ctx, "t2", "b")
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's")
		_, err = b.Driver.SkillUpsert(ctx, store.SkillPutParams{Tenant: "t1", Name: "a-b", Source: agentfleet.SkillSourceImported}, at)
		require.NoError(t, err)
		_, err = b.Driver.SkillUpsert(ctx, store.SkillPutParams{Tenant: "t1", Name: "a_b", Source: agentfleet.SkillSourceImported}, at)
		require.NoError(t, err)
		list, err := b.Driver.SkillList(ctx, "t1")
		require.NoError(t, err)
		var names []string
		for _, k := range list {
			names = append(names, k.Name)
		}
		require.Equal(t, []string{"a-b", "a_b", "b"}, names, "bytewise")
		_, err = b.Driver.SkillUpsert(ctx, store.SkillPutParams{Tenant: "nobody", Name: "x", Source: agentfleet.SkillSourceImported}, at)
		require.ErrorIs(t, err, store.ErrNotFound)

		ok, err := b.Driver.SkillDelete(ctx, "t2", "b")
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = b.Driver.SkillDelete(ctx, "t1", "b")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = b.Driver.SkillGet(ctx, "t1", "b")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Revision", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		n, err := b.Driver.SkillRevisionGet(ctx, "t1")
		require.NoError(t, err)
		require.Zero(t, n)
		for want := int64(1); want <= 3; want++ {
			n, err = b.Driver.SkillRevisionBump(ctx, "t1")
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		n, err = b.Driver.SkillRevisionGet(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		n, err = b.Driver.SkillRevisionGet(ctx, "nobody")
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
