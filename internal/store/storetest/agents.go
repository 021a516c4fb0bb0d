package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testAgent(t *testing.T, newStore NewStore) {
	full := agentfleet.AgentSpec{
		Persona: "You write.", Model: "m1", Primitives: []string{"fetch", "ai"},
		MaxTurns: 9, MaxTokens: 50_000, MaxCompletionTokens: 512, MaxModelCallsPerTurn: 4,
		TurnTimeout: agentfleet.Duration(30 * time.Second), Egress: []string{"billing.internal", "10.0.0.0/8"},
		Approve: []string{"http.post", "fetch:POST"}, ApprovalTimeout: agentfleet.Duration(time.Hour),
		ApprovalCallbackURL: "https://hooks.example.com/approvals",
	}
	t.Run("Versions", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		a1, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "writer", Spec: full})
		require.NoError(t, err)
		require.Equal(t, agentfleet.Agent{Tenant: ten.ID, Name: "writer", Version: 1, AgentSpec: full,
			CreatedAt: a1.CreatedAt, UpdatedAt: a1.CreatedAt}, a1)
		require.Equal(t, a1, b.agent(t, ten.ID, "writer", 0))
		require.Equal(t, a1, b.agent(t, ten.ID, "writer", 1))

		// The same spec again is no new version.
		same, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "writer", Spec: full})
		require.NoError(t, err)
		require.Equal(t, a1, same)

		// A replacement is whole: what it leaves out takes the default.
		// Nil primitives (all) and empty primitives (none) stay apart.
		time.Sleep(time.Millisecond)
		a2, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "writer",
			Spec: agentfleet.AgentSpec{Persona: "You edit.", Primitives: []string{}}})
		require.NoError(t, err)
		require.Equal(t, 2, a2.Version)
		require.Equal(t, a1.CreatedAt, a2.CreatedAt)
		require.True(t, a2.UpdatedAt.After(a1.UpdatedAt))
		require.Equal(t, agentfleet.AgentSpec{Persona: "You edit.", Primitives: []string{}, ApprovalTimeout: agentfleet.ApprovalTimeoutDefault}, a2.AgentSpec)
		require.Equal(t, a2, b.agent(t, ten.ID, "writer", 0))
		// Version 1 is kept as it was.
		require.Equal(t, a1.AgentSpec, b.agent(t, ten.ID, "writer", 1).AgentSpec)
		_, err = b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: ten.ID, Name: "writer", Version: 3})
		require.ErrorIs(t, err, store.ErrNotFound)

		reader, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "reader"})
		require.NoError(t, err)
		require.Nil(t, reader.Primitives)
		require.Equal(t, agentfleet.ApprovalTimeoutDefault, reader.ApprovalTimeout, "approval_timeout defaults to 24h")

		// Another tenant sees none of them.
		other := b.tenant(t, store.TenantCreateParams{})
		_, err = b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: other.ID, Name: "writer"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: other.ID, Name: "writer", Version: 1})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("List", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for _, n := range []string{"a1", "a2", "a3"} {
			time.Sleep(time.Millisecond)
			_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: n, Spec: agentfleet.AgentSpec{Persona: n}})
			require.NoError(t, err)
		}
		// A replacement keeps the agent's place (its creation).
		_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "a1", Spec: agentfleet.AgentSpec{Persona: "again"}})
		require.NoError(t, err)
		var names []string
		cursor := ""
		for {
			res, err := b.s.AgentList(b.ctx, store.AgentListParams{Tenant: ten.ID, Limit: 2, Cursor: cursor})
			require.NoError(t, err)
			for _, a := range res.Agents {
				names = append(names, a.Name)
				if a.Name == "a1" {
					require.Equal(t, 2, a.Version)
					require.Equal(t, "again", a.Persona)
				}
			}
			if cursor = res.NextCursor; cursor == "" {
				break
			}
		}
		require.Equal(t, []string{"a3", "a2", "a1", agentfleet.DefaultAgent}, names, "newest first")
		_, err = b.s.AgentList(b.ctx, store.AgentListParams{Tenant: ten.ID, Cursor: "bogus!"})
		require.ErrorIs(t, err, store.ErrInvalid)
		empty, err := b.s.AgentList(b.ctx, store.AgentListParams{Tenant: "nobody"})
		require.NoError(t, err)
		require.Empty(t, empty.Agents)
	})
	t.Run("Delete", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		err := b.s.AgentDelete(b.ctx, store.AgentDeleteParams{Tenant: ten.ID, Name: agentfleet.DefaultAgent})
		require.ErrorIs(t, err, store.ErrInvalid, "the default agent stays")
		require.Equal(t, 1, b.agent(t, ten.ID, agentfleet.DefaultAgent, 0).Version)
		require.ErrorIs(t, b.s.AgentDelete(b.ctx, store.AgentDeleteParams{Tenant: ten.ID, Name: "ghost"}), store.ErrNotFound)

		for _, persona := range []string{"one", "two"} {
			_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "temp", Spec: agentfleet.AgentSpec{Persona: persona}})
			require.NoError(t, err)
		}
		inFlight := b.run(t, store.RunCreateParams{Tenant: ten.ID, Agent: "temp", Message: "m"})
		require.Equal(t, 2, inFlight.AgentVersion)
		require.NoError(t, b.s.AgentDelete(b.ctx, store.AgentDeleteParams{Tenant: ten.ID, Name: "temp"}))
		_, err = b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: ten.ID, Name: "temp"})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.AgentDelete(b.ctx, store.AgentDeleteParams{Tenant: ten.ID, Name: "temp"}), store.ErrNotFound)
		// The run admitted under version 2 still finds it.
		require.Equal(t, "two", b.agent(t, ten.ID, "temp", inFlight.AgentVersion).Persona)
		_, err = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, Agent: "temp", Message: "m"})
		require.ErrorIs(t, err, store.ErrUnknownAgent)

		// Defined again, it numbers on: version 2 of "temp" stays the
		// one the run was admitted under.
		again, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "temp", Spec: agentfleet.AgentSpec{Persona: "three"}})
		require.NoError(t, err)
		require.Equal(t, 3, again.Version)
		require.Equal(t, "two", b.agent(t, ten.ID, "temp", 2).Persona)
	})
	t.Run("RunVersion", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		def := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "m"})
		require.Equal(t, 1, def.AgentVersion)
		_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: agentfleet.DefaultAgent, Spec: agentfleet.AgentSpec{Persona: "new"}})
		require.NoError(t, err)
		later := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "m"})
		require.Equal(t, 2, later.AgentVersion)
		require.Equal(t, 1, b.get(t, def.ID).AgentVersion, "a replacement never changes an admitted run")

		// A run naming an agent the tenant lacks is refused whole, with
		// or without an idempotency key.
		for _, key := range []string{"", "k1"} {
			_, err := b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, Agent: "ghost", Message: "m", IdempotencyKey: key})
			require.ErrorIs(t, err, store.ErrUnknownAgent)
			require.ErrorIs(t, err, store.ErrInvalid)
		}
		res, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, res.Runs, 2)
		// Another tenant's agent is unknown too.
		other := b.tenant(t, store.TenantCreateParams{})
		_, err = b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: other.ID, Name: "theirs"})
		require.NoError(t, err)
		_, err = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, Agent: "theirs", Message: "m"})
		require.ErrorIs(t, err, store.ErrUnknownAgent)
	})
	t.Run("BatchVersion", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for _, persona := range []string{"one", "two"} {
			_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "bulk", Spec: agentfleet.AgentSpec{Persona: persona}})
			require.NoError(t, err)
		}
		bt := b.admitBatch(t, store.BatchAdmitParams{Tenant: ten.ID, Agent: "bulk"}, 3, 2, 0)
		runs, err := b.s.BatchRunList(b.ctx, store.BatchRunListParams{ID: bt.ID, AfterIndex: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, runs, 3)
		for _, r := range runs {
			require.Equal(t, 2, r.Run.AgentVersion, "a batch's runs are admitted under its agent's version")
		}
		_, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID, Agent: "ghost"})
		require.ErrorIs(t, err, store.ErrUnknownAgent)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: "nobody", Name: "x"})
		require.ErrorIs(t, err, store.ErrNotFound)
		for name, p := range map[string]store.AgentUpsertParams{
			"no name":          {Tenant: ten.ID},
			"bad name":         {Tenant: ten.ID, Name: "a.b"},
			"negative limit":   {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{MaxTurns: -1}},
			"negative timeout": {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{ApprovalTimeout: -1}},
			"long system":      {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{Persona: strings.Repeat("p", 32<<10+1)}},
			"NUL in system":    {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{Persona: "a\x00"}},
			"empty primitive":  {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{Primitives: []string{""}}},
			"NUL in egress":    {Tenant: ten.ID, Name: "x", Spec: agentfleet.AgentSpec{Egress: []string{"a\x00"}}},
		} {
			_, err := b.s.AgentUpsert(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err = b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: ten.ID, Name: "x"})
		require.ErrorIs(t, err, store.ErrNotFound, "nothing invalid was stored")
	})
}

func (b bundle) agent(t *testing.T, tenant, name string, version int) agentfleet.Agent {
	t.Helper()
	a, err := b.s.AgentGetByName(b.ctx, store.AgentGetByNameParams{Tenant: tenant, Name: name, Version: version})
	require.NoError(t, err)
	return a
}
