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
	require.ErrorContains(t, err, "does not open")
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
