package loop

import (
	"fmt"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// protocolPrompt opens every system prompt. It is ours, kept short: every
// byte of it is paid on every turn of every run.
const protocolPrompt = "You work by writing JavaScript. Each turn, reply with one fenced ```javascript block that defines `function run(args) { ... }`.\n" +
	"- run(args) executes in a sandbox. args is what your previous run() returned (first turn: the task's context, or null).\n" +
	"- Return what you want to keep: it reaches your next turn in full as args. You never see returned values, only their shape (keys, types, lengths); log() what you need to read, briefly.\n" +
	"- Call answer(result) when done (a string or any JSON value). That ends the run.\n" +
	"- If the script throws, times out or hits a limit, you see the error and args stay unchanged; fix the code and retry.\n" +
	"- Only your latest script stays in this conversation; earlier ones are elided.\n" +
	"- Everything is synchronous; no timers, files or process. Use only the API below.\n" +
	"- A reply without a code block is your final answer.\n"

// SystemPrompt composes the system prompt: the protocol, then the agent's
// persona, then the sandbox API as TypeScript declarations.
func SystemPrompt(persona, declarations string) string {
	var b strings.Builder
	b.Grow(len(protocolPrompt) + len(persona) + len(declarations) + 32)
	b.WriteString(protocolPrompt)
	if p := strings.TrimSpace(persona); p != "" {
		b.WriteString("\n")
		b.WriteString(p)
		b.WriteString("\n")
	}
	b.WriteString("\nAPI:\n```ts\n")
	b.WriteString(strings.TrimSpace(declarations))
	b.WriteString("\n```\n")
	return b.String()
}

// taskMessage is the first user message: the task, and the shape of the
// context when one was given (the context itself is turn 1's args).
func taskMessage(run *agentfleet.Run) string {
	if len(run.Context) == 0 || string(run.Context) == "null" {
		return run.Message
	}
	return fmt.Sprintf("%s\n\n(args on the first turn holds the context given with the task: %s)", run.Message, Digest(run.Context))
}

// turnHistory is the recorded part of one committed turn.
type turnHistory struct {
	turn        int
	reply       string
	observation string
	hasScript   bool
}

// groupTurns gathers steps into turns, in turn order. Steps of other kinds
// are ignored; a turn without a model reply is skipped.
func groupTurns(steps []agentfleet.Step) []turnHistory {
	var out []turnHistory
	for _, s := range steps {
		if len(out) == 0 || out[len(out)-1].turn != s.Turn {
			out = append(out, turnHistory{turn: s.Turn})
		}
		t := &out[len(out)-1]
		switch s.Kind {
		case agentfleet.StepModel:
			t.reply = s.Content
			_, t.hasScript = ExtractScript(s.Content)
		case agentfleet.StepObservation:
			t.observation = s.Content
		}
	}
	kept := out[:0]
	for _, t := range out {
		if t.reply != "" {
			kept = append(kept, t)
		}
	}
	return kept
}

// conversation is the composed prompt and what composing it dropped.
type conversation struct {
	messages []agentfleet.ChatMessage
	// dropped counts turns left out: outside the history window or
	// trimmed to fit the context budget.
	dropped int
	// trimmed counts the turns of dropped removed for the context budget.
	trimmed int
}

// composeConversation builds the messages for the next model call. Earlier
// scripts are elided; the oldest turns are trimmed, whole (a script never
// leaves without its result), while the estimate exceeds contextTokens,
// always keeping the latest turn. The model is told how many turns are
// missing.
func composeConversation(system string, run *agentfleet.Run, steps []agentfleet.Step, contextTokens int) conversation {
	turns := groupTurns(steps)
	firstLoaded := run.Turn + 1
	if len(turns) > 0 {
		firstLoaded = turns[0].turn
	}
	lastScript := -1
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].hasScript {
			lastScript = i
			break
		}
	}

	head := []agentfleet.ChatMessage{
		{Role: agentfleet.RoleSystem, Content: system},
		{Role: agentfleet.RoleUser, Content: taskMessage(run)},
	}
	pairs := make([][2]agentfleet.ChatMessage, len(turns))
	cost := agentfleet.EstimateTokens(head)
	costs := make([]int64, len(turns))
	for i, t := range turns {
		reply := t.reply
		if t.hasScript && i != lastScript {
			reply = ElideScript(reply, t.turn)
		}
		pairs[i] = [2]agentfleet.ChatMessage{
			{Role: agentfleet.RoleAssistant, Content: reply},
			{Role: agentfleet.RoleUser, Content: t.observation},
		}
		costs[i] = agentfleet.EstimateTokens(pairs[i][:])
		cost += costs[i]
	}

	start, trimmed := 0, 0
	for contextTokens > 0 && cost > int64(contextTokens) && start < len(pairs)-1 {
		cost -= costs[start]
		start++
		trimmed++
	}
	dropped := firstLoaded - 1 + trimmed
	if dropped < 0 {
		dropped = 0
	}

	msgs := make([]agentfleet.ChatMessage, 0, len(head)+1+2*(len(pairs)-start))
	msgs = append(msgs, head...)
	if dropped > 0 {
		msgs = append(msgs, agentfleet.ChatMessage{
			Role:    agentfleet.RoleUser,
			Content: fmt.Sprintf("[%d earlier turn(s) omitted to fit the context; args still carries their result]", dropped),
		})
	}
	for _, p := range pairs[start:] {
		msgs = append(msgs, p[0], p[1])
	}
	return conversation{messages: msgs, dropped: dropped, trimmed: trimmed}
}
