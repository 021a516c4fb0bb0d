package fakeserver

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// plainBodies are request bodies, valid and not: the fleet's shape, and
// what the one-pass decoder must leave to encoding/json.
var plainBodies = []string{
	`{"model":"m","messages":[{"role":"system","content":"You write JavaScript."},{"role":"user","content":"go"}],"max_tokens":2048}`,
	` { "model" : "m" , "messages" : [ { "role" : "user" , "content" : "a\nb \"q\" \\ \/ \t" } ] , "temperature" : 0.25 , "stream" : false } `,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":7,"stream":true,"temperature":-1.5e2}`,
	`{"model":"m","messages":[]}`,
	`{"model":"m","messages":[{}]}`,
	`{}`,
	`{"model":"m","model":"n","messages":[{"role":"user","content":"dup keys: the last wins"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"trailing backslash \\"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"é 😀"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"\u00e9 \u003cT\u003e \u0026 \u2028 \u00E9"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"\u0000 \u001f"}]}`,
	// Left to encoding/json: other keys, surrogate pairs, parts, nulls.
	`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"lone \ud83d"}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"parts"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":null}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x","name":"n"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":null}`,
	// Invalid: every one must be refused by both.
	`{"model":"m","messages":[{"role":"user","content":"x"},]}`,
	`{"model":"m","messages":[{"role":"user","content":"x",}]}`,
	`{"model":"m",}`,
	`{"model":"m"`,
	`{"model":"m"} extra`,
	`{"model":"m","max_tokens":+5}`,
	`{"model":"m","max_tokens":007}`,
	`{"model":"m","max_tokens":1.5}`,
	`{"model":"m","temperature":.5}`,
	`{"model":"m","temperature":1.}`,
	`{"model":"m","temperature":1e}`,
	`{"model":"m","stream":tru}`,
	"{\"model\":\"line\nbreak\"}",
	"{\"model\":\"bad \xff utf-8\"}",
	`{"model":"m\x"}`,
	`{"model":"\u00g1"}`,
	`{"model":"\u12"}`,
	`{"model":"\u"}`,
	`{"model":"m\"}`,
	`{"model":m}`,
	`["model"]`,
	``,
}

// What the one-pass decoder accepts, it decodes exactly as encoding/json
// does; what encoding/json refuses, it refuses too.
func TestDecodePlainAgreesWithEncodingJSON(t *testing.T) {
	fast := 0
	for _, body := range plainBodies {
		var want wireRequest
		werr := json.Unmarshal([]byte(body), &want)
		got, ok := decodePlain([]byte(body))
		if werr != nil {
			require.False(t, ok, "accepted what encoding/json refuses (%v): %s", werr, body)
			continue
		}
		if ok {
			fast++
			require.Equal(t, want, got, body)
		}
	}
	require.Equal(t, 11, fast, "the fleet's shapes take the one-pass path")
}

func FuzzDecodePlain(f *testing.F) {
	for _, body := range plainBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodePlain(body)
		if !ok {
			return
		}
		var want wireRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("accepted what encoding/json refuses (%v): %q", err, body)
		}
		require.Equal(t, want, got)
	})
}
