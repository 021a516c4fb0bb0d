package rules

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain ascii", "plain ascii"},
		{"héllo wörld ✓ 😀", "héllo wörld ✓ 😀"},
		{"\x00", "\uFFFD"},
		{"a\x00b", "a\uFFFDb"},
		{"\x80", "\uFFFD"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"c\xe2\x82", "c\uFFFD\uFFFD"},         // truncated sequence: one per byte
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // an encoded surrogate is not UTF-8
		{"\uFFFD stays", "\uFFFD stays"},
	} {
		got := Clean(tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.True(t, utf8.ValidString(got))
		require.NotContains(t, got, "\x00")
	}
}

func TestCleanReturnsCleanInputAsIs(t *testing.T) {
	s := strings.Repeat("clean text ", 100)
	require.Equal(t, 0, int(testing.AllocsPerRun(100, func() { _ = Clean(s) })))
	raw := []byte(`{"a":"x\n\u00e9\"","b":[1,2]}`)
	require.Equal(t, 0, int(testing.AllocsPerRun(100, func() { _ = CleanJSON(raw) })))
	require.Same(t, &raw[0], &CleanJSON(raw)[0])
}

func TestCleanJSON(t *testing.T) {
	for _, tc := range []struct{ in, want, problem string }{
		{`null`, `null`, ""},
		{`{"a":"b"}`, `{"a":"b"}`, ""},
		{`"\u0000"`, `"\ufffd"`, "U+0000 (NUL)"},
		{`["x\u0000y", "\u0000"]`, `["x\ufffdy", "\ufffd"]`, "U+0000 (NUL)"},
		{`"\\u0000"`, `"\\u0000"`, ""}, // an escaped backslash, then text
		{`"\\\u0000"`, `"\\\ufffd"`, "U+0000 (NUL)"},
		{`"\u00e9\u003c\n\t\"\/"`, `"\u00e9\u003c\n\t\"\/"`, ""},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`, ""},
		{`"\uD83D\uDE00"`, `"\uD83D\uDE00"`, ""},
		{`"\ud83d"`, `"\ufffd"`, "an unpaired UTF-16 surrogate escape"},
		{`"\ud83d\u0041"`, `"\ufffd\u0041"`, "an unpaired UTF-16 surrogate escape"},
		{`"\ude00x"`, `"\ufffdx"`, "an unpaired UTF-16 surrogate escape"},
		{"{\"k\":\"\x80\"}", "{\"k\":\"\uFFFD\"}", "bytes that are not UTF-8"},
		{"{\"\xff\":1}", "{\"\uFFFD\":1}", "bytes that are not UTF-8"},
	} {
		got := CleanJSON([]byte(tc.in))
		require.Equal(t, tc.want, string(got), "%s", tc.in)
		require.True(t, json.Valid(got), "%s stays valid JSON", tc.in)
		require.True(t, utf8.Valid(got))
		err := CheckJSONText("context", []byte(tc.in))
		if tc.problem == "" {
			require.NoError(t, err, "%s", tc.in)
			continue
		}
		require.ErrorIs(t, err, store.ErrInvalid, "%s", tc.in)
		require.ErrorContains(t, err, "context contains "+tc.problem)
		// What jsonb would refuse is gone: no NUL, no lone surrogate
		// survives a decode.
		var v any
		require.NoError(t, json.Unmarshal(got, &v))
	}
}

func TestCheckText(t *testing.T) {
	require.NoError(t, CheckText("message", "fine ✓"))
	err := CheckText("message", "a\x00")
	require.ErrorIs(t, err, store.ErrInvalid)
	require.ErrorContains(t, err, "message contains U+0000 (NUL)")
	err = CheckText("message", "a\xff")
	require.ErrorIs(t, err, store.ErrInvalid)
	require.ErrorContains(t, err, "message is not valid UTF-8")
	err = CheckMetadata("metadata", map[string]string{"ok": "fine", "bad": "\x00"})
	require.ErrorContains(t, err, `metadata value of "bad" contains U+0000`)
	err = CheckMetadata("metadata", map[string]string{"b\x00d": "fine"})
	require.ErrorContains(t, err, `metadata key "b\x00d" contains U+0000`)
}

// BenchmarkCleanClean is the turn path's common case: a clean 4 KiB log.
func BenchmarkCleanClean(b *testing.B) {
	s := strings.Repeat("log line: value=42 ok\n", 4096/22+1)[:4096]
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		_ = Clean(s)
	}
}

// BenchmarkCleanCleanUnicode is a clean 4 KiB log that is not ASCII.
func BenchmarkCleanCleanUnicode(b *testing.B) {
	s := strings.Repeat("journal: café ✓ naïve 😀\n", 4096/30+1)[:4096]
	s = strings.ToValidUTF8(s, "")
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		_ = Clean(s)
	}
}

// BenchmarkCleanDirty is a 4 KiB log with one NUL in it.
func BenchmarkCleanDirty(b *testing.B) {
	s := strings.Repeat("log line: value=42 ok\n", 4096/22+1)[:4095] + "\x00"
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		_ = Clean(s)
	}
}

// BenchmarkCleanJSONClean is clean 4 KiB carried args as a script
// returns them (newlines escaped, no \u escape): the fast path.
func BenchmarkCleanJSONClean(b *testing.B) {
	benchCleanJSON(b, "row "+strings.Repeat("x", 8)+"\n")
}

// BenchmarkCleanJSONCleanEscapes is clean 4 KiB args with a \u escape in
// every string (Go escapes < and >): the scan past the fast path.
func BenchmarkCleanJSONCleanEscapes(b *testing.B) {
	benchCleanJSON(b, "row <"+strings.Repeat("x", 8)+">\n")
}

func benchCleanJSON(b *testing.B, item string) {
	items := make([]string, 4096/(len(item)+4))
	for i := range items {
		items[i] = item
	}
	raw, _ := json.Marshal(map[string]any{"items": items})
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		_ = CleanJSON(raw)
	}
}
