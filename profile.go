package agentfleet

import "fmt"

// Profile is how an agent's prompt spends its model's context window
// (AgentSpec.ContextWindow): the token budget the estimated prompt must
// fit, when the history is folded into a summary and how much of it stays
// verbatim, how much of a turn's log reaches the history, and what is held
// back for the reply. Tokens are EstimateTokens's, which overcount
// English by about a third.
type Profile struct {
	// Window is the context window it derives from (0: none set).
	Window int `json:"context_window"`
	// Budget bounds the estimated prompt, system prompt and task
	// included: past it the oldest history is trimmed.
	Budget int `json:"budget"`
	// When the history (earlier runs, turns and any summary) exceeds
	// Trigger tokens, its oldest part is folded into a summary so that
	// about Keep tokens of the most recent stay verbatim.
	Trigger int `json:"compact_trigger"`
	Keep    int `json:"compact_keep"`
	// SummaryTokens caps a summary's length (the summarizer's reply).
	SummaryTokens int `json:"summary_tokens"`
	// LogCap bounds the bytes of one turn's log lines carried into the
	// history.
	LogCap int `json:"log_cap"`
	// Reserve is the completion reserve: the reply's cap unless the
	// agent sets max_completion_tokens.
	Reserve int `json:"reserve"`
}

// Bounds of AgentSpec.ContextWindow.
const (
	ContextWindowMin = 2048
	ContextWindowMax = 10_000_000
)

// The profile of an agent that sets no context_window: the prompt budget
// and reply cap the engine always had (loop.ContextTokensDefault and
// loop.MaxCompletionTokensDefault), and the sandbox's own log cap, so no
// log line that reached the history before is cut.
const (
	ProfileBudgetDefault  = 24000
	ProfileReserveDefault = 2048
	ProfileLogCapDefault  = 16 << 10
)

// Bounds of a derived profile.
const (
	// BudgetMax caps the prompt budget of a large window: each turn pays
	// its whole prompt again, and past this a summary carries older
	// history better than more verbatim turns do.
	BudgetMax     = 128 << 10
	reserveMin    = 512 // one script and a few lines of prose
	reserveMax    = 8192
	summaryMin    = 256
	summaryMax    = 4096
	logCapMin     = 512
	logCapMax     = 64 << 10
	bytesPerToken = 3 // EstimateTextTokens's rate
)

// ProfileFor derives the profile of a context window; 0 gives today's
// defaults (ProfileBudgetDefault and its siblings).
//
// The ratios: a sixteenth of the window is held for the reply (a 32k
// window keeps today's 2,048) and an eighth more against estimates that
// undercount dense text; the rest is the budget. The history is folded at
// three quarters of the budget, leaving the last quarter to the system
// prompt and the task, and keeps three eighths of it verbatim: with the
// summary (a sixteenth) that is under half the budget, so a compaction
// buys five sixteenths of growth before the next. A turn's logs take at
// most an eighth of the budget, so the kept part holds three turns
// however loud they are.
func ProfileFor(contextWindow int) Profile {
	if contextWindow <= 0 {
		p := derive(ProfileBudgetDefault, ProfileReserveDefault)
		p.LogCap = ProfileLogCapDefault
		return p
	}
	w := contextWindow
	reserve := clamp(w/16, reserveMin, reserveMax)
	budget := min(w-reserve-w/8, BudgetMax)
	p := derive(budget, reserve)
	p.Window = w
	return p
}

func derive(budget, reserve int) Profile {
	return Profile{
		Budget:        budget,
		Trigger:       budget * 3 / 4,
		Keep:          budget * 3 / 8,
		SummaryTokens: clamp(budget/16, summaryMin, summaryMax),
		LogCap:        clamp(budget/8*bytesPerToken, logCapMin, logCapMax),
		Reserve:       reserve,
	}
}

// Fit lowers the compaction trigger and keep to what the budget leaves
// after fixed tokens (the system prompt and the task message), so that a
// long persona makes the history fold before it must be trimmed.
func (p Profile) Fit(fixed int) Profile {
	room := max(p.Budget-fixed, 0)
	p.Trigger = min(p.Trigger, room)
	p.Keep = min(p.Keep, p.Trigger/2)
	return p
}

// SummaryWindow is the window a summarizer call must fit when the agent
// names no context window: what a prompt and its reply took before.
func (p Profile) SummaryWindow() int {
	if p.Window > 0 {
		return p.Window
	}
	return p.Budget + p.Reserve
}

// CheckContextWindow refuses a context_window no model serves: under
// ContextWindowMin (the turn protocol and the sandbox API alone fill
// much of it) or over ContextWindowMax. Zero means unset.
func CheckContextWindow(n int) error {
	if n != 0 && (n < ContextWindowMin || n > ContextWindowMax) {
		return fmt.Errorf("context_window: %d tokens is not a model's window; give %d to %d (or leave it out for the default)",
			n, ContextWindowMin, ContextWindowMax)
	}
	return nil
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }
