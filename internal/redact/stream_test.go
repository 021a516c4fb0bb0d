package redact_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/redact"
)

// However a text is cut into pieces, the pieces a Stream returns join
// into what String makes of the whole, and none of them holds four bytes
// in a row of a value (a value split across two pieces included).
func TestStreamPiecesJoinIntoTheRedactedTextAndNeverCarryPartOfAValue(t *testing.T) {
	vals := []redact.Value{
		{Name: "gh", Value: "ghp_S3cretValue0123456789abcdef"},
		{Name: "short", Value: "pa$$"},
		{Name: "prefix", Value: "ghp_S3cret"}, // begins the longer one
		{Name: "quote", Value: `tok"en\x`},    // JSON-escaped form too
		{Value: "sk-provider-KEY-42"},
		{Name: "uni", Value: "ключ-секрет"},
	}
	r := redact.New(vals)
	texts := []string{
		"no secrets here at all, just prose\n```javascript\nfunction run(){}\n```",
		"token ghp_S3cretValue0123456789abcdef and pa$$ and again ghp_S3cretValue0123456789abcdef!",
		"cut short: ghp_S3cret then ghp_S3cretValue0123 and pa$ and pa$$",
		`json "tok\"en\\x" raw tok"en\x key sk-provider-KEY-42.`,
		"ключ-секрет в тексте — ключ-секре не он",
		"ends with a value sk-provider-KEY-42",
		"ends with half a value sk-provid",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range texts {
		want := r.String(text)
		for trial := range 200 {
			s := redact.NewStream(r)
			var got strings.Builder
			var pieces []string
			rest := text
			for rest != "" {
				n := 1 + rng.IntN(min(len(rest), 1+trial%12))
				out := s.Write(rest[:n])
				rest = rest[n:]
				pieces = append(pieces, out)
				got.WriteString(out)
			}
			out := s.Flush()
			pieces = append(pieces, out)
			got.WriteString(out)
			require.Equal(t, want, got.String(), "text %q", text)
			for _, p := range pieces {
				for _, v := range vals {
					requireNoPartOf(t, p, v.Value, want)
				}
			}
		}
	}
}

// requireNoPartOf fails when piece holds six bytes in a row of v that
// the redacted whole (want) does not hold as text of its own.
func requireNoPartOf(t *testing.T, piece, v, want string) {
	t.Helper()
	for i := 0; i+6 <= len(v); i++ {
		if strings.Contains(want, v[i:i+6]) {
			continue
		}
		require.NotContains(t, piece, v[i:i+6], "piece %q carries part of %q", piece, v)
	}
}

// Without values a Stream is the identity and holds nothing back; a
// rune cut by the provider is held until it is whole.
func TestStreamWithoutValuesPassesPiecesThrough(t *testing.T) {
	s := redact.NewStream(nil)
	require.Equal(t, "abc", s.Write("abc"))
	require.Empty(t, s.Flush())

	s = redact.NewStream(redact.New([]redact.Value{{Name: "x", Value: "zzzz"}}))
	e := "é"
	require.Equal(t, "a", s.Write("a"+e[:1]))
	require.Equal(t, e+"b", s.Write(e[1:]+"b"))
	require.Equal(t, "", s.Write("zz"))
	require.Equal(t, "[secret:x]", s.Write("zz"))
	require.Equal(t, "zz", func() string { s.Write("zz"); return s.Flush() }())
}
