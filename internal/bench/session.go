// The session scenario: one conversation of many runs, measured at the
// fake model, and a run that carries a large value between its turns.

package bench

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// SummaryMarker is what tells a summary call (the compactor folding a
// session's history) from an agent's turn: the call's system message
// contains it, in lower case, capitalized or in upper case ("summarize",
// "Summary", "SUMMARIES"). An agent's own system prompt must not.
const SummaryMarker = "summar"

// IsSummaryCall reports whether a model request is a summary call: its
// first system message contains SummaryMarker (see there). It runs on
// every request the fake model serves, so it does not lower-case the
// prompt.
func IsSummaryCall(msgs []agentfleet.ChatMessage) bool {
	for _, m := range msgs {
		if m.Role == agentfleet.RoleSystem {
			return strings.Contains(m.Content, SummaryMarker) || strings.Contains(m.Content, summaryMarkerTitle) ||
				strings.Contains(m.Content, summaryMarkerUpper)
		}
	}
	return false
}

var (
	summaryMarkerTitle = strings.ToUpper(SummaryMarker[:1]) + SummaryMarker[1:]
	summaryMarkerUpper = strings.ToUpper(SummaryMarker)
)

// Bounds and targets of the session scenario.
const (
	// SessionGrowthBound bounds the last run's first prompt over the
	// first run's (DESIGN.md 17: at most twice).
	SessionGrowthBound = 2.0
	// CarryItems, CarryTurns: the carry run's list and its model calls.
	CarryItems = 200
	CarryTurns = 6
	// CarryPromptCharsTarget and CarryPrefixTarget bound the carry
	// run: the prompt characters of its calls in all, and the least
	// fraction of a call's prompt that is a prefix of the next's.
	CarryPromptCharsTarget = 15_500
	CarryPrefixTarget      = 0.90
	// SessionAgent is the agent the session's runs use; its
	// context_window, the least an agent may set, makes its history
	// fold into a summary every few runs.
	SessionAgent         = "bench-session"
	SessionContextWindow = agentfleet.ContextWindowMin
)

// SessionFigures: one session's runs one after another, and the carry run.
type SessionFigures struct {
	SessionID string `json:"session_id"`
	// Agent is the session's agent, ContextWindow its context_window.
	Agent         string `json:"agent"`
	ContextWindow int    `json:"context_window"`
	// Runs are the session's runs in order.
	Runs []SessionRun `json:"runs"`
	// FirstPromptGrowth is the last run's first prompt (characters) over
	// the first run's; GrowthBound its bound.
	FirstPromptGrowth float64 `json:"first_prompt_growth"`
	GrowthBound       float64 `json:"growth_bound"`
	// ModelCalls, SummaryCalls and SummarySteps are the session runs'
	// in all.
	ModelCalls   int `json:"model_calls"`
	SummaryCalls int `json:"summary_calls"`
	SummarySteps int `json:"summary_steps"`
	// PrefixMin and PrefixMean are over every pair of consecutive agent
	// calls of a run, all runs together (absent without such a pair).
	PrefixMin  *float64 `json:"prefix_min,omitempty"`
	PrefixMean *float64 `json:"prefix_mean,omitempty"`
	// Carry is the run that carries a large list between its turns.
	Carry *CarryFigures `json:"carry,omitempty"`
}

// SessionRun is what the fake model saw of one run.
type SessionRun struct {
	// Run is 1-based; ID the fleet's run id.
	Run int    `json:"run"`
	ID  string `json:"id"`
	// FirstPromptChars is the characters of all messages of the run's
	// first agent call (summary calls do not count as first);
	// FirstPromptTokens agentfleet.EstimateTokens of them.
	FirstPromptChars  int   `json:"first_prompt_chars"`
	FirstPromptTokens int64 `json:"first_prompt_tokens"`
	// ModelCalls is every call of the run, SummaryCalls among them.
	ModelCalls   int `json:"model_calls"`
	SummaryCalls int `json:"summary_calls"`
	// SummarySteps are the summary checkpoints in the run's trace.
	SummarySteps int `json:"summary_steps"`
	// PromptChars is the characters of the prompts of all its calls.
	PromptChars int `json:"prompt_chars"`
	// PrefixMin and PrefixMean: for each agent call but the last, the
	// fraction of its prompt that is a byte prefix of the next agent
	// call's (what a provider's prompt cache can reuse); absent when
	// the run made fewer than two agent calls.
	PrefixMin  *float64 `json:"prefix_min,omitempty"`
	PrefixMean *float64 `json:"prefix_mean,omitempty"`
	// Status of the run as it ended.
	Status agentfleet.RunStatus `json:"status"`
}

// CarryFigures: one run, outside the session, whose first turn returns a
// list of Items objects that each later turn reads and returns, until
// the last answers.
type CarryFigures struct {
	ID     string               `json:"id"`
	Items  int                  `json:"items"`
	Turns  int                  `json:"turns"`
	Status agentfleet.RunStatus `json:"status"`
	Answer string               `json:"answer"`
	// ModelCalls is every call of the run, SummaryCalls among them.
	ModelCalls   int `json:"model_calls"`
	SummaryCalls int `json:"summary_calls"`
	// CallPromptChars is each call's prompt, PromptChars their sum.
	CallPromptChars []int `json:"call_prompt_chars"`
	PromptChars     int   `json:"prompt_chars"`
	// Prefixes is each call's prompt's fraction that is a prefix of the
	// next call's; PrefixMin the least.
	Prefixes  []float64 `json:"prefixes"`
	PrefixMin *float64  `json:"prefix_min,omitempty"`
	// Their bounds (checked).
	PromptCharsTarget int     `json:"prompt_chars_target"`
	PrefixTarget      float64 `json:"prefix_target"`
}

// session runs one session of Runs runs of Turns turns, each submitted
// once the previous has ended, as a chat's messages are; then the carry
// run. The fake model records every request it serves meanwhile, and
// since one run is in flight at a time, what it served between a run's
// submission and its end is that run's.
func (e *env) session(ctx context.Context) error {
	if err := e.warmup(ctx, min(e.cfg.Warmup, 8)); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "session")
	if err != nil {
		return err
	}
	if _, err := t.c.PutAgent(ctx, SessionAgent, wire.AgentRequest{AgentSpec: agentfleet.AgentSpec{ContextWindow: SessionContextWindow}}); err != nil {
		return fmt.Errorf("define agent %s: %w", SessionAgent, err)
	}
	f := &SessionFigures{SessionID: "bench-" + e.tag + "-session", Agent: SessionAgent, ContextWindow: SessionContextWindow, GrowthBound: SessionGrowthBound}
	e.rep.Figures.Session = f
	e.model.setRecording(true)
	defer e.model.setRecording(false)
	e.startProgress(func(elapsed time.Duration) string {
		return fmt.Sprintf("%s session: %d/%d runs done", elapsed, len(f.Runs), e.cfg.Runs)
	})
	var subs []submission
	submitErrs := 0
	var stopped error
	inSession := 0
	for i := range e.cfg.Runs {
		if ctx.Err() != nil {
			break
		}
		s, err := e.submitRequest(ctx, t, i, wire.RunCreateRequest{
			Message:        sessionMessage(t.tag, i, e.cfg.Turns),
			Agent:          SessionAgent,
			SessionID:      f.SessionID,
			IdempotencyKey: fmt.Sprintf("%s-%d", t.id, i),
			MaxTurns:       e.cfg.Turns + 1,
		})
		if err != nil {
			// The session's later runs still follow: a chat goes on
			// after a message that did not get through.
			submitErrs++
			e.rep.note("run %d of the session: submit: %v", i+1, err)
			continue
		}
		subs = append(subs, s)
		run, err := e.waitRun(ctx, t, s.id)
		if err != nil {
			stopped = fmt.Errorf("run %d of the session (%s): %w", i+1, s.id, err)
			break
		}
		if run.SessionID == f.SessionID {
			inSession++
		}
		r := sessionRunFigures(e.model.takeRecorded())
		r.Run, r.ID, r.Status = i+1, s.id, run.Status
		if r.SummarySteps, err = summarySteps(ctx, t, s.id); err != nil {
			e.rep.note("run %d of the session (%s): read its trace: %v", i+1, s.id, err)
		}
		f.Runs = append(f.Runs, r)
	}
	e.stopProgress()
	if stopped != nil && ctx.Err() != nil {
		return stopped
	}
	if stopped != nil {
		e.rep.note("stopped waiting: %v", stopped)
	}
	counts, _, _, err := e.collect(ctx, t, subs, submitErrs)
	if err != nil {
		return err
	}
	e.rep.Figures.Runs = counts
	f.summarize()
	if stopped == nil {
		e.say("the carry run: %d items over %d turns", CarryItems, CarryTurns)
		c, err := e.carry(ctx, t)
		if err != nil {
			return err
		}
		f.Carry = c
	}

	e.rep.checkRuns()
	e.rep.check("every run in the session", inSession == len(f.Runs), false,
		"%d of %d runs ended with session_id %s", inSession, len(f.Runs), f.SessionID)
	if n := len(f.Runs); n > 0 {
		first, last := f.Runs[0], f.Runs[n-1]
		e.rep.check("session prompt bounded", first.FirstPromptChars > 0 && f.FirstPromptGrowth <= SessionGrowthBound, false,
			"run %d's first prompt %d chars is %.2fx run 1's %d (bound %.0fx)",
			last.Run, last.FirstPromptChars, f.FirstPromptGrowth, first.FirstPromptChars, SessionGrowthBound)
	}
	if c := f.Carry; c != nil {
		want := carryAnswer(CarryItems, CarryTurns)
		e.rep.check("carry run completed", c.Status == agentfleet.StatusCompleted && c.Answer == want && c.ModelCalls-c.SummaryCalls == CarryTurns, false,
			"%s after %d model calls (%d summary calls), answer %q (want %q after %d turns)", c.Status, c.ModelCalls, c.SummaryCalls, c.Answer, want, CarryTurns)
		e.rep.check("carry prompt bounded", c.PromptChars > 0 && c.PromptChars <= CarryPromptCharsTarget, false,
			"its %d calls sent %d prompt characters in all (bound %d)", c.ModelCalls, c.PromptChars, CarryPromptCharsTarget)
		e.rep.check("carry prompt prefix kept", c.PrefixMin != nil && *c.PrefixMin >= CarryPrefixTarget, false,
			"least share of a call's prompt the next call repeats %.3f (bound >= %.2f)", deref(c.PrefixMin), CarryPrefixTarget)
	}
	e.rep.note("prompt characters are those of the messages' content; a call's prefix is the fraction of its prompt (roles and contents in order) that the next agent call of the same run repeats byte for byte; summary calls are told by their system message (%q)", SummaryMarker)
	return nil
}

// waitRun follows run id's events until it ends (giving up after
// cfg.Stall), and returns it as it ended.
func (e *env) waitRun(ctx context.Context, t *tenant, id string) (agentfleet.Run, error) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.Stall)
	defer cancel()
	if err := t.c.Events(rctx, id, 0, func(agentfleet.Event) error { return nil }); err != nil {
		return agentfleet.Run{}, fmt.Errorf("follow its events: %w", err)
	}
	run, err := t.c.GetRun(ctx, id)
	if err != nil {
		return agentfleet.Run{}, fmt.Errorf("read it: %w", err)
	}
	if !run.Status.Terminal() {
		return run, fmt.Errorf("its events ended while it is %s", run.Status)
	}
	return run, nil
}

// summarySteps counts the summary checkpoints in run id's trace.
func summarySteps(ctx context.Context, t *tenant, id string) (int, error) {
	steps, err := t.c.RunSteps(ctx, id, -1)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range steps.Steps {
		if s.Kind == agentfleet.StepSummary {
			n++
		}
	}
	return n, nil
}

// carry runs the carry run in t, outside the session, and reports what
// the fake model saw of it.
func (e *env) carry(ctx context.Context, t *tenant) (*CarryFigures, error) {
	e.model.takeRecorded()
	s, err := e.submitRequest(ctx, t, -1, wire.RunCreateRequest{
		Message:        carryMessage(t.tag, CarryItems, CarryTurns),
		IdempotencyKey: t.id + "-carry",
		MaxTurns:       CarryTurns + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("submit the carry run: %w", err)
	}
	run, err := e.waitRun(ctx, t, s.id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		e.rep.note("the carry run %s: %v", s.id, err)
	}
	calls := e.model.takeRecorded()
	c := &CarryFigures{ID: s.id, Items: CarryItems, Turns: CarryTurns, Status: run.Status, ModelCalls: len(calls),
		PromptCharsTarget: CarryPromptCharsTarget, PrefixTarget: CarryPrefixTarget}
	if run.Answer != nil {
		c.Answer = strings.Trim(string(run.Answer), `"`)
	}
	for _, call := range calls {
		if call.summary {
			c.SummaryCalls++
		}
		n := promptChars(call.messages)
		c.CallPromptChars = append(c.CallPromptChars, n)
		c.PromptChars += n
	}
	c.Prefixes = prefixFractions(agentCalls(calls))
	if len(c.Prefixes) > 0 {
		least := minOf(c.Prefixes)
		c.PrefixMin = &least
	}
	return c, nil
}

// sessionRunFigures reads one run's calls, in order of arrival.
func sessionRunFigures(calls []recordedCall) SessionRun {
	var r SessionRun
	r.ModelCalls = len(calls)
	for _, c := range calls {
		r.PromptChars += promptChars(c.messages)
		if c.summary {
			r.SummaryCalls++
		}
	}
	agent := agentCalls(calls)
	if len(agent) > 0 {
		r.FirstPromptChars = promptChars(agent[0])
		r.FirstPromptTokens = agentfleet.EstimateTokens(agent[0])
	}
	if p := prefixFractions(agent); len(p) > 0 {
		least, mean := minOf(p), meanOf(p)
		r.PrefixMin, r.PrefixMean = &least, &mean
	}
	return r
}

// summarize derives the session's totals from its runs.
func (f *SessionFigures) summarize() {
	var prefixMin, prefixSum float64
	pairs := 0
	for _, r := range f.Runs {
		f.ModelCalls += r.ModelCalls
		f.SummaryCalls += r.SummaryCalls
		f.SummarySteps += r.SummarySteps
		if r.PrefixMin == nil {
			continue
		}
		// Each run's mean weighs as many pairs as its agent calls give.
		n := r.ModelCalls - r.SummaryCalls - 1
		if pairs == 0 || *r.PrefixMin < prefixMin {
			prefixMin = *r.PrefixMin
		}
		prefixSum += *r.PrefixMean * float64(n)
		pairs += n
	}
	if pairs > 0 {
		mean := prefixSum / float64(pairs)
		f.PrefixMin, f.PrefixMean = &prefixMin, &mean
	}
	if n := len(f.Runs); n > 0 && f.Runs[0].FirstPromptChars > 0 {
		f.FirstPromptGrowth = float64(f.Runs[n-1].FirstPromptChars) / float64(f.Runs[0].FirstPromptChars)
	}
}

// agentCalls are the prompts of the calls that are not summary calls.
func agentCalls(calls []recordedCall) [][]agentfleet.ChatMessage {
	var out [][]agentfleet.ChatMessage
	for _, c := range calls {
		if !c.summary {
			out = append(out, c.messages)
		}
	}
	return out
}

// promptChars is the characters of the content of msgs.
func promptChars(msgs []agentfleet.ChatMessage) int {
	n := 0
	for _, m := range msgs {
		n += utf8.RuneCountInString(m.Content)
	}
	return n
}

// promptBytes is a prompt as a provider's cache sees it: each message's
// role and content, in order.
func promptBytes(msgs []agentfleet.ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteByte(0)
		b.WriteString(m.Content)
		b.WriteByte(0)
	}
	return b.String()
}

// prefixFractions is, for each prompt but the last, the fraction of its
// bytes that the next prompt starts with.
func prefixFractions(prompts [][]agentfleet.ChatMessage) []float64 {
	var out []float64
	for i := 0; i+1 < len(prompts); i++ {
		a, b := promptBytes(prompts[i]), promptBytes(prompts[i+1])
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		out = append(out, float64(n)/float64(max(1, len(a))))
	}
	return out
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func meanOf(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// The fake model's side: the tasks of the session scenario and the
// replies that play them.

// sessionMessage is message i of a bench session; carryMessage the
// carry run's task.
func sessionMessage(tag string, i, turns int) string {
	return fmt.Sprintf("bench-chat %s message %d of %d turns: step a counter %d times, then answer", tag, i, turns, turns)
}

func carryMessage(tag string, items, turns int) string {
	return fmt.Sprintf("bench-carry %s: %d items over %d turns", tag, items, turns)
}

var (
	sessionRE = regexp.MustCompile(`(?m)^bench-chat (\S+) message (\d+) of (\d+) turns`)
	carryRE   = regexp.MustCompile(`(?m)^bench-carry (\S+): (\d+) items over (\d+) turns`)
)

// scripted answers a request of a session message or of the carry run,
// if it is one. The run's own task is the last task in the prompt (a
// session's earlier runs come before it, oldest first), and its turn is
// one more than the model's replies after it.
func (m *model) scripted(msgs []agentfleet.ChatMessage) (string, bool) {
	for j := len(msgs) - 1; j >= 0; j-- {
		c := msgs[j].Content
		if msgs[j].Role != agentfleet.RoleUser || !(strings.Contains(c, "bench-chat ") || strings.Contains(c, "bench-carry ")) {
			continue
		}
		k := 1
		for _, after := range msgs[j+1:] {
			if after.Role == agentfleet.RoleAssistant {
				k++
			}
		}
		if ms := sessionRE.FindAllStringSubmatch(c, -1); ms != nil {
			last := ms[len(ms)-1]
			i, _ := strconv.Atoi(last[2])
			turns, _ := strconv.Atoi(last[3])
			return sessionReply(i, k, turns, m.cfg.CompletionTokens), true
		}
		if ms := carryRE.FindAllStringSubmatch(c, -1); ms != nil {
			last := ms[len(ms)-1]
			items, _ := strconv.Atoi(last[2])
			turns, _ := strconv.Atoi(last[3])
			return carryReply(k, items, turns), true
		}
	}
	return "", false
}

// sessionReply is the model's reply to turn k of session message i: as
// reply's, a script counting the turns in the carried state, except that
// it counts only state of its own message, since a session run's first
// args may be the previous run's final value.
func sessionReply(i, k, turns, pad int) string {
	var b strings.Builder
	if pad > 0 {
		b.WriteString("Thinking:")
		for range pad {
			b.WriteString(" lore")
		}
		b.WriteString("\n")
	}
	count := fmt.Sprintf("var s = (args && args.message === %d && args.step) || 0;", i)
	if k < turns {
		fmt.Fprintf(&b, "Step %d of message %d.\n```javascript\nfunction run(args) { %s return {message: %d, step: s + 1} }\n```", k, i, count, i)
	} else {
		fmt.Fprintf(&b, "Message %d done.\n```javascript\nfunction run(args) { %s answer('done %d ' + (s + 1)) }\n```", i, count, i)
	}
	return b.String()
}

// carryReply is the carry run's turn k: the first makes the list, each
// later one reads it (logging what it read) and returns it, the last
// answers with its length.
func carryReply(k, items, turns int) string {
	switch {
	case k == 1:
		return fmt.Sprintf("I will make the list first and keep it in args.\n```javascript\nfunction run(args) {\n"+
			"  var items = [];\n"+
			"  for (var i = 0; i < %d; i++) items.push({id: i, name: \"item \" + i, price: i * 1.25, tags: [\"a\", \"b\"]});\n"+
			"  log(\"made \" + items.length);\n"+
			"  return {items: items};\n}\n```", items)
	case k < turns:
		return fmt.Sprintf("Turn %d: read the list and keep it.\n```javascript\nfunction run(args) {\n"+
			"  var items = args.items;\n"+
			"  log(\"turn %d read \" + items.length + \", last \" + items[items.length - 1].name);\n"+
			"  return {items: items};\n}\n```", k, k)
	default:
		return "The list made it through every turn.\n```javascript\nfunction run(args) {\n" +
			"  answer(\"carried \" + args.items.length + \" items over " + strconv.Itoa(turns) + " turns\");\n}\n```"
	}
}

// carryAnswer is what the carry run answers when the list reached its
// last turn whole.
func carryAnswer(items, turns int) string {
	return fmt.Sprintf("carried %d items over %d turns", items, turns)
}

// summaryReply answers a summary call: a short summary, the same size
// whatever it covers, as a summarizer's is bounded.
func summaryReply(msgs []agentfleet.ChatMessage) string {
	tasks := 0
	for _, m := range msgs {
		tasks += strings.Count(m.Content, "bench-chat ")
	}
	return fmt.Sprintf("Summary: the user sent counter-stepping messages (%d mentioned here); the assistant stepped each counter as asked and answered each one done.", tasks)
}

// rows writes the session's figures as table rows.
func (f *SessionFigures) rows(row func(k, format string, a ...any)) {
	row("session", "%s: %d runs one after another (agent %s, context_window %d), %d model calls, %d of them summary calls; %d summary checkpoints stored",
		f.SessionID, len(f.Runs), f.Agent, f.ContextWindow, f.ModelCalls, f.SummaryCalls, f.SummarySteps)
	if n := len(f.Runs); n > 0 {
		row("first prompt growth", "run %d's first prompt is %.2fx run 1's (%d -> %d chars; bound %.0fx)",
			f.Runs[n-1].Run, f.FirstPromptGrowth, f.Runs[0].FirstPromptChars, f.Runs[n-1].FirstPromptChars, f.GrowthBound)
	}
	if f.PrefixMin != nil {
		row("prompt prefix kept", "min %.3f, mean %.3f of a call's prompt repeated by the run's next call", *f.PrefixMin, *f.PrefixMean)
	}
	for _, r := range f.Runs {
		prefix := "-"
		if r.PrefixMin != nil {
			prefix = fmt.Sprintf("min %.3f mean %.3f", *r.PrefixMin, *r.PrefixMean)
		}
		row(fmt.Sprintf("run %d", r.Run), "first prompt %d chars (~%d tokens), %d calls (%d summary, %d checkpoints), %d prompt chars in all, prefix %s, %s",
			r.FirstPromptChars, r.FirstPromptTokens, r.ModelCalls, r.SummaryCalls, r.SummarySteps, r.PromptChars, prefix, r.Status)
	}
	if c := f.Carry; c != nil {
		row("carry run", "%d items over %d turns: %s, %d model calls (%d summary), answer %q", c.Items, c.Turns, c.Status, c.ModelCalls, c.SummaryCalls, c.Answer)
		chars := make([]string, len(c.CallPromptChars))
		for i, n := range c.CallPromptChars {
			chars[i] = strconv.Itoa(n)
		}
		row("carry prompt chars", "%d in all (bound <= %d): %s per call", c.PromptChars, c.PromptCharsTarget, strings.Join(chars, ", "))
		prefixes := make([]string, len(c.Prefixes))
		for i, p := range c.Prefixes {
			prefixes[i] = fmt.Sprintf("%.3f", p)
		}
		row("carry prefix kept", "min %.3f (bound >= %.2f): %s", deref(c.PrefixMin), c.PrefixTarget, strings.Join(prefixes, ", "))
	}
}
