// The turn's side of compaction: the prompt's budget from the agent's
// profile, and, when the history outgrows the profile's trigger, a
// compaction (compact.go) whose summary step replaces what it covers in
// this prompt and commits with the turn.

package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// compose composes the turn's prompt, compacting its history first when
// the turn is one that compacts and the history exceeds the trigger.
//
// A run compacts when it belongs to a session or its agent sets a
// context_window: a session's history grows with every run, and an agent
// that names its window asked for its profile. Any other run composes
// as it always did, trimmed to Config.ContextTokens, and pays nothing
// more. An agent without a window has the default profile, whose
// trigger comes from the default budget, not Config.ContextTokens.
//
// Its errors are the turn's: ErrStale, or the context ending. A
// compaction that fails for any other reason is a warning event, and the
// prompt goes on trimmed.
func (t *turn) compose(ctx context.Context) (conversation, error) {
	cfg, agent := &t.e.cfg, &t.in.Agent
	in := composeInput{
		system: t.withSkills(ctx, t.e.systemPromptTools(*agent, t.exposed, t.mcpDeclarations(ctx))), run: t.run, session: t.in.Session, steps: t.in.Steps,
		contextTokens: cfg.ContextTokens, logCap: cfg.SessionLogCap,
	}
	var prof agentfleet.Profile
	if agent.ContextWindow > 0 {
		prof = agentfleet.ProfileFor(agent.ContextWindow)
		in.contextTokens, in.logCap = prof.Budget, prof.LogCap
	}
	if t.run.SessionID == "" && agent.ContextWindow == 0 {
		parts := composeParts(in)
		return parts.compose(t.run, in.contextTokens), nil
	}
	if agent.ContextWindow == 0 {
		prof = agentfleet.ProfileFor(0)
	}
	return t.composeCompacting(ctx, in, prof)
}

// composeCompacting is compose for a turn that compacts (apart, so that
// the other turns' prompt parts stay on the stack).
func (t *turn) composeCompacting(ctx context.Context, in composeInput, prof agentfleet.Profile) (conversation, error) {
	parts := composeParts(in)
	prof = prof.Fit(int(parts.fixed))
	var summary *agentfleet.Step
	if parts.history > int64(prof.Trigger) {
		var err error
		if summary, err = t.compact(ctx, &in, &parts, prof); err != nil {
			return conversation{}, err
		}
	}
	conv := parts.compose(t.run, in.contextTokens)
	conv.summary = summary
	return conv, nil
}

// compact folds the oldest of the history into a summary step and
// recomposes parts with it; nil when it folded nothing or failed. The
// items, oldest first: each earlier run's record, the run's task (folded
// with them: a summary step covers the whole session before its run's
// turns), then each turn, its reply and observation together.
func (t *turn) compact(ctx context.Context, in *composeInput, parts *promptParts, prof agentfleet.Profile) (*agentfleet.Step, error) {
	cfg, agent, run := &t.e.cfg, &t.in.Agent, t.run
	var items []CompactItem
	// turnOf is the run's turn each item ends, 0 for the records and
	// the task.
	var turnOf []int
	whole := 0
	if !parts.own {
		for _, rec := range parts.records {
			if len(rec) == 0 {
				continue
			}
			items = append(items, CompactItem{Text: t.clean(messagesText(rec)), Tokens: agentfleet.EstimateTokens(rec)})
			turnOf = append(turnOf, 0)
		}
		// The task stays in this run's prompts (its cost is in the
		// fixed part, not the history's) but the summary must hold it
		// for the session's later runs.
		items = append(items, CompactItem{Text: t.clean("user (this run's task): " + parts.task.Content), Tokens: 1})
		turnOf = append(turnOf, 0)
		whole = len(items)
	}
	for i, pr := range parts.pairs {
		items = append(items, CompactItem{Text: t.clean(messagesText(pr[:])), Tokens: agentfleet.EstimateTokens(pr[:])})
		turnOf = append(turnOf, parts.turns[i].turn)
	}
	var previous string
	var previousTokens int64
	if parts.summary != nil {
		_, previous = ParseSummary(*parts.summary)
		previous = t.clean(previous)
		// As the prompt counts it, header and all, so that Compact
		// folds whenever the history is over the trigger here.
		previousTokens = messageTokens + agentfleet.EstimateTextTokens(parts.summary.Content)
	}
	modelName := firstNonEmpty(agent.SummaryModel, agent.Model, cfg.DefaultModel)
	res, err := Compact(ctx, CompactRequest{
		Model: cfg.Model, ModelName: modelName, Window: prof.SummaryWindow(), Profile: prof,
		Previous: previous, PreviousTokens: previousTokens, Items: items, Whole: whole,
		Meter: cfg.Meter, Tenant: run.Tenant, RunID: run.ID, Unlimited: t.in.TenantUnlimited,
		Journal: cfg.Journal, Turn: t.n,
	})
	// Spent, succeeded or not: the Meter (or the journal) charged the
	// tenant; the run's usage counts it.
	t.res.Usage = t.res.Usage.Add(res.Usage)
	if err != nil {
		if errors.Is(err, ErrStale) || ctx.Err() != nil {
			return nil, err
		}
		t.emit(agentfleet.Event{Type: agentfleet.EventWarning, Summary: "compaction failed; the prompt is trimmed instead",
			Content: fmt.Sprintf("the history (%d tokens) is over the compaction trigger (%d) but summarizing it with %s failed: %v",
				parts.history, prof.Trigger, orModel(modelName), err)})
		return nil, nil
	}
	if res.Covered == 0 {
		return nil, nil
	}
	through := turnOf[res.Covered-1]
	step := agentfleet.Step{
		RunID: run.ID, Turn: t.n, Kind: agentfleet.StepSummary, Content: t.clean(RenderSummary(through, res.Summary)),
		Model: modelName, Usage: res.Usage, CreatedAt: cfg.Now(),
	}
	folded := foldedSummary(parts, res.Covered, whole, turnOf)
	in.steps = append(in.steps[:len(in.steps):len(in.steps)], step)
	*parts = composeParts(*in)
	how := fmt.Sprintf("%d summary call(s)", res.Calls)
	if res.Replayed > 0 {
		how = fmt.Sprintf("%d summary call(s), %d replayed from the journal", res.Calls, res.Replayed)
	}
	t.emit(agentfleet.Event{Type: agentfleet.EventCompacted, Content: res.Summary,
		Summary: fmt.Sprintf("folded %s into a summary (%s); %d of %d items kept verbatim", folded, how, len(items)-res.Covered, len(items)),
		Tokens:  &agentfleet.Tokens{Prompt: res.Usage.PromptTokens, Completion: res.Usage.CompletionTokens}})
	return &step, nil
}

// foldedSummary says what the first covered items were.
func foldedSummary(parts *promptParts, covered, whole int, turnOf []int) string {
	var what []string
	if parts.summary != nil {
		what = append(what, "the previous summary")
	}
	if whole > 0 && covered >= whole {
		if n := whole - 1; n > 0 {
			what = append(what, fmt.Sprintf("%d earlier run(s) of the session", n))
		}
		what = append(what, "the task")
	}
	if first := whole; covered > first {
		a, b := turnOf[first], turnOf[covered-1]
		if a == b {
			what = append(what, fmt.Sprintf("turn %d", a))
		} else {
			what = append(what, fmt.Sprintf("turns %d-%d", a, b))
		}
	}
	return strings.Join(what, ", ")
}

// messagesText renders messages for the summarizer, a line per role.
func messagesText(msgs []agentfleet.ChatMessage) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
	}
	return b.String()
}

func orModel(name string) string {
	if name == "" {
		return "the worker's model"
	}
	return "model " + name
}
