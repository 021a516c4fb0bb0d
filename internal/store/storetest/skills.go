package storetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testSkill(t *testing.T, newStore NewStore) {
	t.Run("PutGetListDelete", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		empty := b.tenant(t, store.TenantCreateParams{})
		rev := func(tenant string) int64 {
			t.Helper()
			n, err := b.s.SkillRevision(b.ctx, tenant)
			require.NoError(t, err)
			return n
		}
		require.Zero(t, rev(ten.ID))
		k, err := b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "csv-summary", Description: "Summarise a CSV file",
			Body: "# Steps\n1. fetch it", Agents: []string{"w", "w", "v"}})
		require.NoError(t, err)
		require.Equal(t, agentfleet.Skill{Tenant: ten.ID, Name: "csv-summary", Description: "Summarise a CSV file", Body: "# Steps\n1. fetch it",
			Agents: []string{"w", "v"}, Source: agentfleet.SkillSourceImported, CreatedAt: k.CreatedAt, UpdatedAt: k.CreatedAt}, k,
			"agents once each; source defaulted")
		require.Equal(t, int64(1), rev(ten.ID))
		k2, err := b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "csv-summary", Description: "v2", Body: "b2",
			Source: agentfleet.SkillSourceCompiled, SourceRun: "run_x"})
		require.NoError(t, err)
		require.Equal(t, k.CreatedAt, k2.CreatedAt)
		require.Equal(t, []string{}, k2.Agents, "empty: all agents")
		require.Equal(t, int64(2), rev(ten.ID), "every write moves the revision")
		require.Zero(t, rev(empty.ID), "another tenant's revision stays")
		got, err := b.s.SkillGet(b.ctx, ten.ID, "csv-summary")
		require.NoError(t, err)
		require.Equal(t, k2, got)
		a, err := b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "aaa", Body: "x"})
		require.NoError(t, err)
		list, err := b.s.SkillList(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, []agentfleet.Skill{a, k2}, list, "by name, bodies included")
		list, err = b.s.SkillList(b.ctx, empty.ID)
		require.NoError(t, err)
		require.Empty(t, list)
		_, err = b.s.SkillList(b.ctx, "nobody")
		require.ErrorIs(t, err, store.ErrNotFound)

		require.NoError(t, b.s.SkillDelete(b.ctx, ten.ID, "aaa"))
		require.Equal(t, int64(4), rev(ten.ID))
		require.ErrorIs(t, b.s.SkillDelete(b.ctx, ten.ID, "aaa"), store.ErrNotFound)
		require.Equal(t, int64(4), rev(ten.ID), "a delete that found nothing wrote nothing")
		_, err = b.s.SkillGet(b.ctx, ten.ID, "aaa")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: "nobody", Name: "x"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("BadInput", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for _, tc := range []struct {
			p    store.SkillPutParams
			want string
		}{
			{store.SkillPutParams{Tenant: ten.ID, Name: "big", Body: strings.Repeat("x", agentfleet.SkillBodyMaxBytes+1)}, "body is 65537 bytes; the limit is 65536"},
			{store.SkillPutParams{Tenant: ten.ID, Name: "fetch"}, `would shadow the script global "fetch"`},
			{store.SkillPutParams{Tenant: ten.ID, Name: "skill_get"}, `would shadow the script global "skillget"`},
			{store.SkillPutParams{Tenant: ten.ID, Name: "ai-json"}, `would shadow the script global "aijson"`},
			{store.SkillPutParams{Tenant: ten.ID, Name: "Upper"}, "lower-case letters"},
			{store.SkillPutParams{Tenant: ten.ID, Name: ""}, "lower-case letters"},
			{store.SkillPutParams{Tenant: ten.ID, Name: "ok", Source: "stolen"}, `source "stolen"`},
			{store.SkillPutParams{Tenant: ten.ID, Name: "ok", Agents: []string{"bad agent"}}, "skill agent"},
			{store.SkillPutParams{Tenant: ten.ID, Name: "ok", Description: strings.Repeat("d", agentfleet.SkillDescriptionMaxBytes+1)}, "description is"},
		} {
			_, err := b.s.SkillPut(b.ctx, tc.p)
			require.ErrorIs(t, err, store.ErrInvalid, tc.want)
			require.Contains(t, err.Error(), tc.want)
		}
		_, err := b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "max", Body: strings.Repeat("x", agentfleet.SkillBodyMaxBytes)})
		require.NoError(t, err, "64 KiB exactly is allowed")
		n, err := b.s.SkillRevision(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "refused puts wrote nothing")
	})
}
