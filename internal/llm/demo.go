package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
)

const (
	// DemoModelLabel is the Model of every demo response, so a trace or
	// a console never passes the demo off as a real model.
	DemoModelLabel = "demo (offline)"
	// DemoMarker starts every answer the demo gives through answer().
	DemoMarker = "[demo model]"
)

// Demo is the offline demo model: deterministic, no network, no key. It
// knows a handful of demo tasks (fizzbuzz, primes, fibonacci, word count,
// sort), picked by keywords in the task, and plays each as a short
// multi-turn script under the code-as-action protocol: every reply is one
// sentence and one fenced javascript block defining run(args) that logs,
// returns state for the next turn, and on the last turn calls answer().
// Any other task gets a one-turn answer saying what the demo can do.
//
// The zero value is ready to use; Demo is safe for concurrent use.
type Demo struct {
	// Latency delays every reply (honouring ctx), so that benchmarks and
	// demos can have a real model's pace.
	Latency time.Duration
}

// Complete returns the demo's reply to the conversation in req.
func (d Demo) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	if err := demoServes(req.Model); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	if err := d.wait(ctx); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	return demoResponse(req), nil
}

// Stream delivers the demo's reply line by line, then Done.
func (d Demo) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if err := demoServes(req.Model); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	if err := d.wait(ctx); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	return streamText(ctx, demoResponse(req), fn)
}

// demoServes refuses a model other than the demo: an agent that names a
// real model needs a worker configured for it.
func demoServes(model string) error {
	if model == "" || strings.EqualFold(model, DemoModelName) {
		return nil
	}
	return &agentfleet.ModelUnavailableError{Model: model,
		Reason: "this worker runs the offline demo model; set AGENTFLEET_MODEL and OPENAI_BASE_URL for a real one"}
}

func (d Demo) wait(ctx context.Context) error {
	if d.Latency <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d.Latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// demoResponse builds the reply with usage by the fleet's own estimate:
// the demo costs nothing, but budgets must see plausible numbers. The demo
// is its own provider, so the usage counts as reported.
func demoResponse(req agentfleet.ModelRequest) agentfleet.ModelResponse {
	content := demoReply(req)
	return agentfleet.ModelResponse{
		Content:       content,
		Model:         DemoModelLabel,
		Usage:         agentfleet.Usage{PromptTokens: EstimateTokens(req.Messages), CompletionTokens: agentfleet.EstimateTextTokens(content)},
		UsageReported: true,
	}
}

// demoStep matches the label that opens every scripted demo reply:
// "[demo model: primes 2/3]". The label is how the demo finds its place in
// a conversation.
var demoStep = regexp.MustCompile(`^\[demo model: ([a-z-]+) (\d+)/(\d+)\]`)

// demoReply decides what to say. The turn is read from the conversation:
// the last assistant message, if it is a demo step, says which script runs
// and how many of its turns are done (the count of assistant replies since
// the task). If the user's message after it reports an error, the demo
// apologises; if the script has turns left, it plays the next one.
// Anything else (a finished script, a reply that is not the demo's) means
// the user messages after it are a new task. Reading the last step rather
// than counting every assistant message keeps the demo right when a
// session's history holds earlier runs.
func demoReply(req agentfleet.ModelRequest) string {
	msgs := req.Messages
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == agentfleet.RoleAssistant {
			last = i
			break
		}
	}
	if req.JSON {
		// A JSON-mode sub-call (aiJSON): the protocol does not apply.
		b, _ := json.Marshal(map[string]any{"demo": true, "note": DemoMarker + " the offline demo model does not answer JSON requests for real"})
		return string(b)
	}
	if last >= 0 {
		if m := demoStep.FindStringSubmatch(strings.TrimSpace(msgs[last].Content)); m != nil {
			s, ok := demoScriptNamed(m[1])
			done, _ := strconv.Atoi(m[2])
			total, _ := strconv.Atoi(m[3])
			if ok && total == s.turns() && done >= 1 && done <= total {
				// A failed turn is reported back as the next user
				// message; that holds after the last step too, whose
				// answer() may be what failed.
				if line, failed := observedError(userAfter(msgs, last)); failed {
					return apology(s.name, line)
				}
				if done < total {
					return s.step(done, "")
				}
			}
		}
	}
	task := userAfter(msgs, last)
	return pickDemoScript(task).step(0, task)
}

// userAfter joins the user messages after index i: the task of a new run,
// or the observation of the last turn.
func userAfter(msgs []agentfleet.ChatMessage, i int) string {
	var parts []string
	for _, m := range msgs[i+1:] {
		if m.Role == agentfleet.RoleUser {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// errorLine matches how a failed turn is reported back: the loop writes
// "Turn 2 failed (timeout): ..."; other wordings say "error" (Error:,
// TypeError), "exception", or open a line with a script error kind
// ("timeout: ...", agentfleet.ScriptErrorKind).
var errorLine = regexp.MustCompile(`(?i)\bfailed\b|error\b|\bexception\b|^\s*(syntax|timeout|memory|limit|cancelled|denied)\s*:`)

// observedError reports whether an observation says the script failed, and
// the line that says so. The demo's own scripts never log these words nor
// return keys that would put them in the digest, so a match is the
// sandbox speaking.
func observedError(obs string) (string, bool) {
	for line := range strings.Lines(obs) {
		if errorLine.MatchString(line) {
			return strings.TrimSpace(line), true
		}
	}
	return "", false
}

// apology is the reply after a failed turn: give up honestly, through
// answer(), so the run ends with a marked answer rather than a loop.
func apology(script, line string) string {
	return demoCode(fmt.Sprintf("[demo model: %s apology] My last script failed, so I will stop here and say so.", script), `
function run(args) {
  log("the previous step failed; giving up");
  answer("`+DemoMarker+` Sorry, I could not finish the `+script+` demo. My script failed with: " + `+jsString(clipText(line, 300))+`);
}`)
}

// demoCode formats a reply the way the protocol asks: prose, then one
// fenced javascript block.
func demoCode(prose, js string) string {
	return prose + "\n\n```javascript\n" + strings.TrimSpace(js) + "\n```\n"
}

// jsString quotes s as a JavaScript string literal. JSON strings are JS
// strings (Go escapes U+2028/U+2029 too); backquotes are escaped so user
// text can never close the markdown fence around the script.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), "`", `\u0060`)
}
