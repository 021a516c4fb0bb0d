package skills_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/skills"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
)

// A worker's index follows writes made through another store handle (as
// another process's would be): the revision moves, the next For
// rebuilds; without a write it is the same index. A tenant without
// skills has no library, nor an agent that sees none.
func TestLibrariesFollowTheRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	writer, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	reader, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Close() })
	_, err = writer.TenantCreate(ctx, store.TenantCreateParams{ID: "t1"})
	require.NoError(t, err)

	libs := skills.NewLibraries(reader)
	// As a turn does: the revision read with the run (here on its own).
	forA := func() (agentfleet.SkillLibrary, error) {
		rev, err := reader.SkillRevision(ctx, "t1")
		require.NoError(t, err)
		return libs.For(ctx, "t1", "a", rev)
	}
	lib, err := forA()
	require.NoError(t, err)
	require.Nil(t, lib, "no skills: no library")

	_, err = writer.SkillPut(ctx, store.SkillPutParams{Tenant: "t1", Name: "csv-totals", Description: "Sum a CSV column", Agents: []string{"b"}})
	require.NoError(t, err)
	lib, err = forA()
	require.NoError(t, err)
	require.Nil(t, lib, "a's agent sees none")
	x1, err := libs.Index(ctx, "t1")
	require.NoError(t, err)
	x2, err := libs.Index(ctx, "t1")
	require.NoError(t, err)
	require.Same(t, x1, x2, "no write: the same index")

	_, err = writer.SkillPut(ctx, store.SkillPutParams{Tenant: "t1", Name: "pdf-text", Description: "Read a PDF"})
	require.NoError(t, err)
	lib, err = forA()
	require.NoError(t, err)
	require.NotNil(t, lib)
	body, err := lib.SkillGet(ctx, "pdf-text")
	require.NoError(t, err)
	require.Empty(t, body)
	_, err = lib.SkillGet(ctx, "csv-totals")
	require.Error(t, err, "b's, not a's")

	require.NoError(t, writer.SkillDelete(ctx, "t1", "pdf-text"))
	lib, err = forA()
	require.NoError(t, err)
	require.Nil(t, lib, "the delete reached the index")
}
