package loop

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentfleet/agentfleet"
	"github.com/stretchr/testify/require"
)

func TestExtractScript(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		reply        string
		wantOK       bool
		wantCode     string
		unterminated bool
	}{
		{"javascript fence", "Let me count.\n```javascript\nfunction run(args) { return 1 }\n```\n", true, "function run(args) { return 1 }\n", false},
		{"js fence with prose after", "```js\nfunction run(a){}\n```\nThat should do it.", true, "function run(a){}\n", false},
		{"upper-case tag", "```JavaScript\nfunction run(){}\n```", true, "function run(){}\n", false},
		{"untagged block defining run", "```\nfunction run(args) { answer(1) }\n```", true, "function run(args) { answer(1) }\n", false},
		{"untagged block without run is prose", "Here is a table:\n```\na | b\n```\nDone.", false, "", false},
		{"python block is not a script", "```python\nprint(1)\n```", false, "", false},
		{"first javascript block wins over later", "```python\nx\n```\n```js\nfunction run(){return 2}\n```\n```js\nfunction run(){return 3}\n```", true, "function run(){return 2}\n", false},
		{"no block is a final answer", "The answer is 42.", false, "", false},
		{"unclosed fence", "```javascript\nfunction run(args) {\n  return [", true, "function run(args) {\n  return [", true},
		{"indented fence", "  ```js\nfunction run(){}\n  ```", true, "function run(){}\n", false},
		{"CRLF line ends", "```js\r\nfunction run(){}\r\n```\r\n", true, "function run(){}\r\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := ExtractScript(tc.reply)
			require.Equal(t, tc.wantOK, ok)
			require.Equal(t, tc.wantCode, s.Code)
			require.Equal(t, tc.unterminated, s.Unterminated)
		})
	}
}

func TestElideScript(t *testing.T) {
	t.Parallel()
	reply := "First I fetch the page.\n```javascript\nfunction run(args) {\n  return fetch('https://example.com').body\n}\n```\nThen I parse it."
	got := ElideScript(reply, 3)
	require.Equal(t, "First I fetch the page.\n[script of turn 3 elided]\nThen I parse it.", got)
	require.NotContains(t, got, "fetch(")
	require.Equal(t, "no code here", ElideScript("no code here", 1))
}

func TestDigest(t *testing.T) {
	t.Parallel()
	items := make([]map[string]any, 200)
	for i := range items {
		items[i] = map[string]any{"id": i, "name": "n", "price": 1.5, "tags": []string{"a", "b"}}
	}
	big, _ := json.Marshal(map[string]any{"items": items, "total": 200, "next": nil})
	wide := map[string]int{}
	for i := range 20 {
		wide[string(rune('a'+i))] = i
	}
	wideJSON, _ := json.Marshal(wide)
	tests := []struct {
		name, in, want string
	}{
		{"empty means undefined", "", "undefined"},
		{"null", "null", "null"},
		{"scalars", `{"b":true,"n":1.5,"s":"secret value"}`, "{b: boolean, n: number, s: string}"},
		{"keys sorted", `{"z":1,"a":2}`, "{a: number, z: number}"},
		{"carry200", string(big), "{items: {id: number, name: string, price: number, tags: string[2]}[200], next: null, total: number}"},
		{"empty containers", `{"a":[],"o":{}}`, "{a: [], o: {}}"},
		{"mixed array is a union", `[1,"x",2,null]`, "(number | string | null)[4]"},
		{"too many shapes become any", `[1,"x",true,null,{}]`, "any[5]"},
		{"depth bounded", `{"a":{"b":{"c":{"d":{"e":1}}}}}`, "{a: {b: {c: {d: {…}}}}}"},
		{"width bounded", string(wideJSON), "{a: number, b: number, c: number, d: number, e: number, f: number, g: number, h: number, i: number, j: number, k: number, l: number, m: number, n: number, o: number, p: number, …4 more}"},
		{"odd keys quoted", `{"my key":1,"x-y":2,"ok_1":3}`, `{"my key": number, ok_1: number, "x-y": number}`},
		{"nested arrays", `[[1,2],[3]]`, "(number[2] | number[1])[2]"},
		{"invalid JSON", `{"a":`, "unparseable value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Digest(json.RawMessage(tc.in))
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDigestNeverShowsValues(t *testing.T) {
	t.Parallel()
	got := Digest(json.RawMessage(`{"password":"hunter2","count":12345,"list":["alpha","beta"]}`))
	for _, v := range []string{"hunter2", "12345", "alpha", "beta"} {
		require.NotContains(t, got, v)
	}
}

func TestDigestIsBounded(t *testing.T) {
	t.Parallel()
	// A thousand distinct wide objects still give a short digest.
	var b strings.Builder
	b.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"k` + strings.Repeat("x", i%50) + `":1}`)
	}
	b.WriteString("]")
	got := Digest(json.RawMessage(b.String()))
	require.LessOrEqual(t, len(got), DigestMaxBytes+len("…"))
	require.Equal(t, "any[1000]", got)
}

func steps(turns ...[2]string) []agentfleet.Step {
	var out []agentfleet.Step
	for i, t := range turns {
		out = append(out,
			agentfleet.Step{Turn: i + 1, Index: 0, Kind: agentfleet.StepModel, Content: t[0]},
			agentfleet.Step{Turn: i + 1, Index: 1, Kind: agentfleet.StepObservation, Content: t[1]},
		)
	}
	return out
}

func TestComposeConversationElidesScriptsThatRan(t *testing.T) {
	t.Parallel()
	run := &agentfleet.Run{ID: "r", Message: "count to three", Turn: 3}
	hist := steps(
		[2]string{"one\n```js\nfunction run(){return 1}\n```", "Turn 1 ran."},
		[2]string{"two\n```js\nfunction run(){return 2}\n```", "Turn 2 ran."},
		[2]string{"three\n```js\nfunction run(){throw 3}\n```", "Turn 3 failed (exception): 3"},
	)
	conv := composeConversation(composeInput{system: "SYS", run: run, steps: hist, contextTokens: 0})
	require.Len(t, conv.messages, 2+6)
	require.Equal(t, "SYS", conv.messages[0].Content)
	require.Equal(t, "count to three", conv.messages[1].Content)
	require.Equal(t, "one\n[script of turn 1 elided]", conv.messages[2].Content)
	require.Equal(t, "Turn 1 ran.", conv.messages[3].Content, "results of elided scripts are kept")
	require.Equal(t, "two\n[script of turn 2 elided]", conv.messages[4].Content)
	require.Contains(t, conv.messages[6].Content, "throw 3", "a failed script stays verbatim, to be fixed")
	require.Zero(t, conv.dropped)
}

func TestComposeConversationTrimsOldestWholeTurns(t *testing.T) {
	t.Parallel()
	run := &agentfleet.Run{ID: "r", Message: "task", Turn: 4}
	long := strings.Repeat("x", 3000) // ~1000 tokens
	hist := steps(
		[2]string{"m1 " + long, "o1 " + long},
		[2]string{"m2 " + long, "o2 " + long},
		[2]string{"m3 " + long, "o3 " + long},
		[2]string{"m4\n```js\nfunction run(){}\n```", "o4"},
	)
	conv := composeConversation(composeInput{system: "SYS", run: run, steps: hist, contextTokens: 2500})
	require.Equal(t, 2, conv.trimmed)
	require.Equal(t, 2, conv.dropped)
	require.Contains(t, conv.messages[2].Content, "2 earlier turn(s) omitted")
	// Every assistant message is followed by its observation.
	for i := 3; i < len(conv.messages); i += 2 {
		require.Equal(t, agentfleet.RoleAssistant, conv.messages[i].Role)
		require.Equal(t, agentfleet.RoleUser, conv.messages[i+1].Role)
		require.Equal(t, conv.messages[i].Content[1:2], conv.messages[i+1].Content[1:2], "a reply stays with its observation")
	}
	require.Equal(t, "m3", conv.messages[3].Content[:2])
	require.Equal(t, "o4", conv.messages[len(conv.messages)-1].Content)
	require.LessOrEqual(t, agentfleet.EstimateTokens(conv.messages), int64(2500))
}

func TestComposeConversationNeverDropsLatestTurn(t *testing.T) {
	t.Parallel()
	run := &agentfleet.Run{ID: "r", Message: "task", Turn: 1}
	hist := steps([2]string{strings.Repeat("y", 30000), "obs"})
	conv := composeConversation(composeInput{system: "SYS", run: run, steps: hist, contextTokens: 100})
	require.Len(t, conv.messages, 4)
	require.Zero(t, conv.trimmed)
}

func TestComposeConversationCountsTurnsOutsideWindow(t *testing.T) {
	t.Parallel()
	run := &agentfleet.Run{ID: "r", Message: "task", Turn: 12}
	hist := steps() // built below with turn numbers 11 and 12
	hist = append(hist,
		agentfleet.Step{Turn: 11, Kind: agentfleet.StepModel, Content: "m11"},
		agentfleet.Step{Turn: 11, Index: 1, Kind: agentfleet.StepObservation, Content: "o11"},
		agentfleet.Step{Turn: 12, Kind: agentfleet.StepModel, Content: "m12"},
		agentfleet.Step{Turn: 12, Index: 1, Kind: agentfleet.StepObservation, Content: "o12"},
	)
	conv := composeConversation(composeInput{system: "SYS", run: run, steps: hist, contextTokens: 0})
	require.Equal(t, 10, conv.dropped)
	require.Contains(t, conv.messages[2].Content, "10 earlier turn(s) omitted")
}

func TestTaskMessageShowsContextShapeOnly(t *testing.T) {
	t.Parallel()
	run := &agentfleet.Run{Message: "sum the prices", Context: json.RawMessage(`{"prices":[1,2,3],"currency":"EUR"}`)}
	got := taskMessage(run, nil)
	require.Contains(t, got, "{currency: string, prices: number[3]}")
	require.NotContains(t, got, "EUR")
}

func TestObservation(t *testing.T) {
	t.Parallel()
	ok := Observation(2, agentfleet.ExecResult{Logs: "hello\n"}, "{a: number}", 2048)
	require.Equal(t, "Turn 2 ran.\nlog:\nhello\nreturned {a: number} (2.0 KiB)\n", ok)
	require.Equal(t, "hello", observationLogs(ok))
	failed := Observation(3, agentfleet.ExecResult{Err: &agentfleet.ScriptError{Kind: agentfleet.ScriptTimeout, Message: "script ran longer than 5s"}}, "{a: number}", 0)
	require.Equal(t, "Turn 3 failed (timeout): script ran longer than 5s\nargs unchanged: {a: number}\n", failed)
	require.True(t, observationFailed(failed, 3))
	require.False(t, observationFailed(ok, 2))
	require.Empty(t, observationLogs(failed))
	answered := Observation(4, agentfleet.ExecResult{Answered: true, Logs: "done"}, "", 0)
	require.Equal(t, "Turn 4 answered.\nlog:\ndone\n", answered)
	require.Equal(t, "done", observationLogs(answered))
	// Observations stored in the older wording give their logs too.
	require.Equal(t, "a\nb", observationLogs("Turn 1 ran.\nlog:\na\nb\nreturned {n: number} (7 B), passed to the next turn as args\n"))
	require.Empty(t, observationLogs("Turn 1 ran.\nlog: (empty)\nreturned {n: number} (7 B), passed to the next turn as args\n"))
}

func FuzzDigest(f *testing.F) {
	for _, seed := range []string{`{"a":[1,"x",{"b":null}]}`, `[]`, `"s\"q"`, `{"k\u00e9y":true}`, `[[[[[[1]]]]]]`, `-1.5e3`, `{"a":1,"a":"x"}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := Digest(json.RawMessage(in))
		if json.Valid([]byte(in)) && strings.TrimSpace(in) != "" && got == "unparseable value" {
			t.Fatalf("valid JSON %q reported unparseable", in)
		}
		if len(got) > DigestMaxBytes+len("…") {
			t.Fatalf("digest of %d bytes exceeds the bound", len(got))
		}
	})
}

func BenchmarkDigest(b *testing.B) {
	items := make([]map[string]any, 2000)
	for i := range items {
		items[i] = map[string]any{"id": i, "name": "n", "price": 1.5, "tags": []string{"a", "b"}, "desc": strings.Repeat("x", 200)}
	}
	raw, _ := json.Marshal(map[string]any{"items": items})
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		Digest(raw)
	}
}
