package openaiwire

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentfleet/agentfleet"
)

// BenchmarkComplete is one model call of a typical turn (a 2.7 KB system
// prompt, the task, the previous script and its result) against a server
// that answers at once with a canned reply: the client's own cost.
func BenchmarkComplete(b *testing.B) {
	reply := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",` +
		`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Step.\n` + "```javascript\\nfunction run(args) { return {step: 1} }\\n```" + `"}}],` +
		`"usage":{"prompt_tokens":900,"completion_tokens":40,"total_tokens":940}}`)
	bd := setup(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
	req := agentfleet.ModelRequest{MaxTokens: 2048, Messages: []agentfleet.ChatMessage{
		{Role: agentfleet.RoleSystem, Content: strings.Repeat("You write JavaScript; keep it short. ", 75)},
		{Role: agentfleet.RoleUser, Content: "Compute the first 15 Fibonacci numbers."},
		{Role: agentfleet.RoleAssistant, Content: "Step 1.\n```javascript\nfunction run(args) { var a = [0, 1]; while (a.length < 15) a.push(a[a.length-1] + a[a.length-2]); return {fib: a} }\n```"},
		{Role: agentfleet.RoleUser, Content: "returned: {fib: number[15]}"},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := bd.client.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
