package secrets

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSealOpen(t *testing.T) {
	b, err := ParseKey(NewKey())
	require.NoError(t, err)
	sealed, err := b.Seal("whsec_abc", "trigger-1")
	require.NoError(t, err)
	require.NotContains(t, sealed, "whsec_abc")
	again, err := b.Seal("whsec_abc", "trigger-1")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce every time")

	got, err := b.Open(sealed, "trigger-1")
	require.NoError(t, err)
	require.Equal(t, "whsec_abc", got)

	_, err = b.Open(sealed, "trigger-2")
	require.Error(t, err, "bound to where it is kept")
	other, err := ParseKey(NewKey())
	require.NoError(t, err)
	_, err = other.Open(sealed, "trigger-1")
	require.ErrorContains(t, err, "which neither")
	flipped := sealed[:len(sealed)-2] + strings.ToUpper(sealed[len(sealed)-2:len(sealed)-1]) + "A"
	if flipped != sealed {
		_, err = b.Open(flipped, "trigger-1")
		require.Error(t, err)
	}
	_, err = b.Open("plain", "trigger-1")
	require.Error(t, err)
}

func TestParseKey(t *testing.T) {
	_, err := ParseKey("not base64 !")
	require.ErrorContains(t, err, "openssl rand -base64 32")
	_, err = ParseKey("c2hvcnQ=")
	require.ErrorContains(t, err, "decodes to 5 bytes")
	var none *Box
	_, err = none.Seal("x", "y")
	require.ErrorIs(t, err, ErrNoKey)
	require.Contains(t, ErrNoKey.Error(), EnvKey)
}

func TestRotation(t *testing.T) {
	oldKey, newKey := NewKey(), NewKey()
	old, err := ParseKey(oldKey)
	require.NoError(t, err)
	sealed, err := old.Seal("ghp_token", "tenant/github")
	require.NoError(t, err)
	require.Equal(t, old.KeyID(), KeyIDOf(sealed))
	require.Len(t, old.KeyID(), 16)

	rotated, err := ParseKeys(newKey, " "+oldKey+" ,")
	require.NoError(t, err)
	require.NotEqual(t, old.KeyID(), rotated.KeyID())
	require.False(t, rotated.Current(sealed), "sealed under the previous key: a rekey rewrites it")
	got, err := rotated.Open(sealed, "tenant/github")
	require.NoError(t, err, "a previous key still opens what it sealed")
	require.Equal(t, "ghp_token", got)

	resealed, err := rotated.Seal(got, "tenant/github")
	require.NoError(t, err)
	require.True(t, rotated.Current(resealed))
	onlyNew, err := ParseKey(newKey)
	require.NoError(t, err)
	_, err = onlyNew.Open(sealed, "tenant/github")
	require.ErrorContains(t, err, "which neither", "without the previous key the old value does not open")
	got, err = onlyNew.Open(resealed, "tenant/github")
	require.NoError(t, err)
	require.Equal(t, "ghp_token", got)

	_, err = ParseKeys(newKey, "not base64!")
	require.ErrorContains(t, err, EnvKeyPrevious)
}

// A value sealed before key ids ("v1:") opens under whichever key sealed it.
func TestLegacySealedValuesOpen(t *testing.T) {
	k := NewKey()
	b, err := ParseKey(k)
	require.NoError(t, err)
	v2, err := b.Seal("whsec_x", "trigger-1")
	require.NoError(t, err)
	v1 := legacyPrefix + v2[len(sealedPrefix)+len(b.KeyID())+1:]
	require.Equal(t, "", KeyIDOf(v1))
	rotated, err := ParseKeys(NewKey(), k)
	require.NoError(t, err)
	got, err := rotated.Open(v1, "trigger-1")
	require.NoError(t, err)
	require.Equal(t, "whsec_x", got)
	require.False(t, rotated.Current(v1))
	_, err = rotated.Open(v1, "trigger-2")
	require.Error(t, err)
}
