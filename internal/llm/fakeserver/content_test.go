package fakeserver

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A message's content decodes exactly as encoding/json decodes the same
// literal, on the fast path (one-letter escapes) and off it.
func TestMessageContentDecodesLikeEncodingJSON(t *testing.T) {
	literals := []string{
		`""`, `"plain"`, `"line\nbreak\ttab\r\"quoted\" back\\slash \/ \b\f"`,
		`"é and 😀 as is"`, `"\u00e9 escaped"`, `"\ud83d\ude00 pair"`, `"trailing\\"`,
		"\"bad \xff utf-8\"", `"x\u003cy"`,
	}
	for _, lit := range literals {
		var want string
		require.NoError(t, json.Unmarshal([]byte(lit), &want), lit)
		var got messageContent
		require.NoError(t, got.UnmarshalJSON([]byte(lit)), lit)
		require.Equal(t, want, string(got), lit)
	}
	var parts messageContent
	require.NoError(t, parts.UnmarshalJSON([]byte(`[{"type":"text","text":"a"},{"type":"text","text":"b\n"}]`)))
	require.Equal(t, "ab\n", string(parts))
	var null messageContent = "x"
	require.NoError(t, null.UnmarshalJSON([]byte(`null`)))
	require.Empty(t, string(null))
	var bad messageContent
	require.Error(t, bad.UnmarshalJSON([]byte(`42`)))
}

// BenchmarkDecodeRequest is the server's reading of a typical turn's
// request: a 2.7 KB system prompt, the task, a script and its result.
func BenchmarkDecodeRequest(b *testing.B) {
	body, err := json.Marshal(map[string]any{
		"model": "m", "max_tokens": 2048,
		"messages": []map[string]string{
			{"role": "system", "content": strings.Repeat("You write JavaScript;\nkeep it \"short\". ", 70)},
			{"role": "user", "content": "Compute the first 15 Fibonacci numbers."},
			{"role": "assistant", "content": "Step 1.\n```javascript\nfunction run(args) { return {fib: [0, 1]} }\n```"},
			{"role": "user", "content": "returned: {fib: number[2]}"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
		if _, err := decodeRequest(r); err != nil {
			b.Fatal(err)
		}
	}
}

// A streamed content chunk's string is what encoding/json makes of it.
func TestAppendJSONStringEncodesLikeEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "quote \" back \\ slash", "line\nbreak\ttab\r", "\x01\x1f ctl", "é 😀 <&>", "\u2028"} {
		var got string
		require.NoError(t, json.Unmarshal(appendJSONString(nil, s), &got), s)
		require.Equal(t, s, got)
	}
}
