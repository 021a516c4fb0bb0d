package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/secrets"
)

// AGENTFLEET_SECRETS_KEY_PREVIOUS is checked at start and its keys open
// what they sealed; it means nothing without a current key.
func TestSecretsKeyPreviousFromEnv(t *testing.T) {
	oldKey, newKey := secrets.NewKey(), secrets.NewKey()
	t.Setenv(secrets.EnvKey, newKey)
	t.Setenv(secrets.EnvKeyPrevious, oldKey+",c2hvcnQ=")
	_, err := ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_SECRETS_KEY_PREVIOUS decodes to 5 bytes")

	t.Setenv(secrets.EnvKeyPrevious, oldKey)
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	old, err := secrets.ParseKey(oldKey)
	require.NoError(t, err)
	sealed, err := old.Seal("s3cret", "where")
	require.NoError(t, err)
	box := cfg.secretsBox()
	got, err := box.Open(sealed, "where")
	require.NoError(t, err, "a value sealed under the previous key opens")
	require.Equal(t, "s3cret", got)
	require.False(t, box.Current(sealed))
	cur, err := secrets.ParseKey(newKey)
	require.NoError(t, err)
	require.Equal(t, cur.KeyID(), box.KeyID(), "it seals under the current key")

	t.Setenv(secrets.EnvKey, "")
	_, err = ConfigFromEnv()
	require.ErrorContains(t, err, "AGENTFLEET_SECRETS_KEY_PREVIOUS is set without AGENTFLEET_SECRETS_KEY")
}
