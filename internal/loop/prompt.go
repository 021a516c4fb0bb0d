// Prompt composition: the system prompt, the session's history and the
// run's own turns, rendered so that what one model call sent is the
// start of what the next one sends (providers cache prompt prefixes).

package loop

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// protocolPrompt opens every system prompt. It is ours, kept short: every
// byte of it is paid on every turn of every run.
const protocolPrompt = "You work by writing JavaScript. Each turn, reply with one ```javascript block defining `function run(args)`; it runs in a sandbox, synchronously (no await, timers, files or process; only the API below).\n" +
	"- args is what your previous run() returned (first turn: what the task says, else null). Return what to keep: it reaches your next turn in full, but you see only its shape, so log() what you need, briefly.\n" +
	"- answer(result) ends the run (a string or any JSON value); so does a reply without a code block.\n" +
	"- A script that throws, times out or hits a limit leaves args unchanged; fix it and retry.\n" +
	"- Once a turn has run, its script is elided here (a failed one stays); its log and result stay.\n"

// SystemPrompt composes the system prompt: the protocol, then the agent's
// persona, then the sandbox API as TypeScript declarations. brief shows
// the long declarations by name only (help() logs them in full): for an
// agent given every primitive, most of which a run never calls.
func SystemPrompt(persona, declarations string, brief bool) string {
	api := apiDeclarations(declarations, brief)
	var b strings.Builder
	b.Grow(len(protocolPrompt) + len(persona) + len(api) + 32)
	b.WriteString(protocolPrompt)
	if p := strings.TrimSpace(persona); p != "" {
		b.WriteString("\n")
		b.WriteString(p)
		b.WriteString("\n")
	}
	b.WriteString("\nAPI:\n```ts\n")
	b.WriteString(api)
	b.WriteString("\n```\n")
	return b.String()
}

// BriefDeclarationMaxChars is the longest declaration a brief API shows
// in full.
const BriefDeclarationMaxChars = 120

// apiDeclarations is the sandbox's declarations as the prompt shows them:
// without the opening comment that restates the protocol, and when brief,
// the declarations longer than BriefDeclarationMaxChars listed by name
// after the others.
func apiDeclarations(decls string, brief bool) string {
	decls = strings.TrimSpace(decls)
	if first, rest, ok := strings.Cut(decls, "\n"); ok && strings.HasPrefix(first, "// Sandbox API:") {
		decls = rest
	}
	if !brief {
		return decls
	}
	// A declaration is a line and the indented lines that continue it.
	var decl []string
	for _, l := range strings.Split(decls, "\n") {
		if strings.HasPrefix(l, " ") && len(decl) > 0 {
			decl[len(decl)-1] += "\n" + l
			continue
		}
		decl = append(decl, l)
	}
	var kept, named []string
	for _, d := range decl {
		name, ok := declaredName(d)
		if ok && len(d) > BriefDeclarationMaxChars {
			named = append(named, name)
			continue
		}
		kept = append(kept, d)
	}
	if len(named) == 0 {
		return decls
	}
	// The limits line stays last.
	last := len(kept) - 1
	if last >= 0 && strings.HasPrefix(kept[last], "//") {
		kept = append(kept[:last:last], "// Also declared; help() logs them in full: "+strings.Join(named, ", "), kept[last])
	} else {
		kept = append(kept, "// Also declared; help() logs them in full: "+strings.Join(named, ", "))
	}
	return strings.Join(kept, "\n")
}

// withModules adds the declarations of an agent's tool modules to the
// sandbox's, before the limits line, which stays last.
func withModules(decls, modules string) string {
	if modules == "" {
		return decls
	}
	decls = strings.TrimRight(decls, "\n")
	if i := strings.LastIndexByte(decls, '\n'); i >= 0 && strings.HasPrefix(decls[i+1:], "// Limits") {
		return decls[:i+1] + modules + "\n" + decls[i+1:] + "\n"
	}
	return decls + "\n" + modules + "\n"
}

var declNames = regexp.MustCompile(`^declare (?:function|const) ([A-Za-z_$][\w$]*)(\(m: '([\w-]+)'\))?`)

// declaredName is what a declaration declares: a function's or constant's
// name, or require('module').
func declaredName(decl string) (string, bool) {
	m := declNames.FindStringSubmatch(decl)
	switch {
	case m == nil:
		return "", false
	case m[1] == "require" && m[3] != "":
		return "require('" + m[3] + "')", true
	case m[1] == "require":
		// A tool module (require('api:billing')): its line is already
		// as brief as it gets (past a length, a catalog and help()).
		return "", false
	}
	return m[1], true
}

// SessionRun is an earlier ended run of a run's session with its steps:
// the prompt recalls its message, the prose of its turns (scripts
// elided), their logs within the log cap, and its answer or error.
type SessionRun struct {
	Run   agentfleet.Run
	Steps []agentfleet.Step
}

// Bounds of what an earlier run of the session keeps in the prompt.
const (
	// SessionLogCapDefault bounds the log characters of one earlier
	// run (Config.SessionLogCap).
	SessionLogCapDefault = 2000
	// SessionAnswerMaxChars bounds the answer or error it shows.
	SessionAnswerMaxChars = 4000
)

// firstArgs is turn 1's args when the run was given no context: the final
// carried value of the session's previous run, or nil.
func firstArgs(run *agentfleet.Run, session []SessionRun) json.RawMessage {
	if hasValue(run.Context) || len(session) == 0 {
		return nil
	}
	if prev := session[len(session)-1].Run.Args; hasValue(prev) {
		return prev
	}
	return nil
}

func hasValue(v json.RawMessage) bool {
	s := strings.TrimSpace(string(v))
	return s != "" && s != "null"
}

// taskMessage is the run's user message: the task, and the shape of
// what turn 1's args holds, saying where it came from (the context given
// with the task, or the session's previous run).
func taskMessage(run *agentfleet.Run, session []SessionRun) string {
	if hasValue(run.Context) {
		return fmt.Sprintf("%s\n\n(args on the first turn holds the context given with the task: %s)", run.Message, Digest(run.Context))
	}
	if prev := firstArgs(run, session); prev != nil {
		return fmt.Sprintf("%s\n\n(args on the first turn holds what this session's previous run carried last: %s)", run.Message, Digest(prev))
	}
	return run.Message
}

// RenderSummary is a summary step's Content: a header naming the last
// turn of the step's own run that it covers, then the summary. A summary
// covers everything of its session before that point: the earlier runs,
// and its own run's message and turns through that one (0: the message
// and none of its turns).
func RenderSummary(throughTurn int, text string) string {
	return summaryHeaderOpen + strconv.Itoa(throughTurn) + "]\n" + text
}

const summaryHeaderOpen = "[summary of the session through turn "

var summaryHeader = regexp.MustCompile(`^\[summary of the session through turn (\d+)\]$`)

// ParseSummary reads a summary step (RenderSummary): the last turn of its
// run it covers and the summary. A step without the header covers the
// turns before its own and is all summary.
func ParseSummary(s agentfleet.Step) (throughTurn int, text string) {
	first, rest, _ := strings.Cut(s.Content, "\n")
	if m := summaryHeader.FindStringSubmatch(first); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n, rest
		}
	}
	return s.Turn - 1, s.Content
}

func summaryThrough(s agentfleet.Step) int {
	n, _ := ParseSummary(s)
	return n
}

// turnHistory is the recorded part of one committed turn.
type turnHistory struct {
	turn        int
	reply       string
	observation string
	hasScript   bool
	script      Script // when hasScript
	failed      bool
}

// splitSteps gathers steps into turns, in turn order, and picks out the
// summary steps. Steps of other kinds are ignored; a turn without a model
// reply is skipped.
func splitSteps(steps []agentfleet.Step) (turns []turnHistory, summaries []agentfleet.Step) {
	var out []turnHistory
	for _, s := range steps {
		if s.Kind == agentfleet.StepSummary {
			summaries = append(summaries, s)
			continue
		}
		if len(out) == 0 || out[len(out)-1].turn != s.Turn {
			out = append(out, turnHistory{turn: s.Turn})
		}
		t := &out[len(out)-1]
		switch s.Kind {
		case agentfleet.StepModel:
			t.reply = s.Content
			t.script, t.hasScript = ExtractScript(s.Content)
		case agentfleet.StepObservation:
			t.observation = s.Content
			t.failed = observationFailed(s.Content, s.Turn)
		}
	}
	kept := out[:0]
	for _, t := range out {
		if t.reply != "" {
			kept = append(kept, t)
		}
	}
	return kept, summaries
}

// conversation is the composed prompt and what composing it dropped.
type conversation struct {
	messages []agentfleet.ChatMessage
	// dropped counts turns of the run left out: outside the history
	// window or trimmed to fit the context budget (not those a summary
	// covers).
	dropped int
	// trimmed counts the turns of dropped removed for the context
	// budget, trimmedRuns the earlier runs of the session.
	trimmed, trimmedRuns int
	// budget is the contextTokens it was composed to; summary the
	// checkpoint the turn's compaction made for it, if any.
	budget  int
	summary *agentfleet.Step
}

// composeInput is what a prompt is composed of.
type composeInput struct {
	system string
	run    *agentfleet.Run
	// session is the run's session's earlier ended runs, oldest first;
	// steps are the run's own, of the turns in the history window.
	session []SessionRun
	steps   []agentfleet.Step
	// contextTokens is the prompt budget (zero: none); logCap bounds
	// each earlier run's logs (zero: SessionLogCapDefault).
	contextTokens int
	logCap        int
}

// composeConversation builds the messages for the next model call: the
// system prompt; the latest summary checkpoint in place of everything it
// covers; the session's earlier runs after it, oldest first; the task;
// then the run's turns. A turn is rendered the same way in every prompt
// from the first that holds it (its script elided unless it failed), so
// each prompt starts with the one before it. While the estimate exceeds
// contextTokens, whole earlier runs and then the run's oldest whole turns
// are trimmed (a script never leaves without its result), always keeping
// the latest turn; the model is told how many are missing.
func composeConversation(in composeInput) conversation {
	p := composeParts(in)
	return p.compose(in.run, in.contextTokens)
}

// promptParts are a prompt's parts before the budget trims them.
type promptParts struct {
	system string
	task   agentfleet.ChatMessage
	// summary is the latest summary step, nil without one; own says it
	// is the run's own (it covers the whole session and the task).
	summary *agentfleet.Step
	own     bool
	// records are the session's runs after the summary, turns and pairs
	// the run's turns after it (each one's cost is EstimateTokens of
	// its messages, counted again where needed: a slice of them would
	// cost the turn an allocation).
	records [][]agentfleet.ChatMessage
	turns   []turnHistory
	pairs   [][2]agentfleet.ChatMessage
	// fixed is the system prompt's and the task's cost, history the
	// rest's (summary, records, turns); coveredTurns the run's turns the
	// summary covers.
	fixed, history int64
	coveredTurns   int
}

func composeParts(in composeInput) promptParts {
	turns, summaries := splitSteps(in.steps)
	logCap := in.logCap
	if logCap <= 0 {
		logCap = SessionLogCapDefault
	}

	// The latest summary, and how far it reaches: into the run itself,
	// or into one of the session's earlier runs.
	var summary *agentfleet.Step
	session, covered, through := in.session, -1, 0
	if len(summaries) > 0 {
		summary = &summaries[len(summaries)-1]
		session, through = nil, summaryThrough(*summary)
		kept := turns[:0:0]
		for _, t := range turns {
			if t.turn > through {
				kept = append(kept, t)
			}
		}
		turns = kept
	} else {
	latest:
		for i := len(session) - 1; i >= 0; i-- {
			steps := session[i].Steps
			for j := len(steps) - 1; j >= 0; j-- {
				if steps[j].Kind == agentfleet.StepSummary {
					summary = &steps[j]
					session, covered, through = session[i:], 0, summaryThrough(*summary)
					break latest
				}
			}
		}
	}

	p := promptParts{summary: summary, own: len(summaries) > 0, turns: turns}
	p.system = in.system
	p.task = agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: taskMessage(in.run, in.session)}
	p.fixed = 2*messageTokens + agentfleet.EstimateTextTokens(in.system) + agentfleet.EstimateTextTokens(p.task.Content)
	if summary != nil {
		p.history = messageTokens + agentfleet.EstimateTextTokens(summary.Content)
	}

	p.records = make([][]agentfleet.ChatMessage, len(session))
	for i := range session {
		th := -1
		if i == covered {
			th = through
		}
		p.records[i] = sessionRecord(&session[i], th, logCap)
		p.history += agentfleet.EstimateTokens(p.records[i])
	}

	p.pairs = make([][2]agentfleet.ChatMessage, len(turns))
	for i, t := range turns {
		reply := t.reply
		if t.hasScript && !t.failed {
			reply = elide(reply, t.script, t.turn)
		}
		p.pairs[i] = [2]agentfleet.ChatMessage{
			{Role: agentfleet.RoleAssistant, Content: reply},
			{Role: agentfleet.RoleUser, Content: t.observation},
		}
		p.history += agentfleet.EstimateTokens(p.pairs[i][:])
	}
	if p.own {
		p.coveredTurns = through
	}
	return p
}

// compose trims the parts to contextTokens (zero: no budget) and renders
// the messages.
func (p *promptParts) compose(run *agentfleet.Run, contextTokens int) conversation {
	// Trim while over the budget, counting the messages that say what
	// was left out.
	records, pairs, turns := p.records, p.pairs, p.turns
	cost := p.fixed + p.history
	firstRecord, start := 0, 0
	dropped := droppedTurns(run, turns, start, p.coveredTurns)
	for contextTokens > 0 {
		c := cost
		if firstRecord > 0 {
			c += markerTokens
		}
		if dropped > 0 {
			c += markerTokens
		}
		if c <= int64(contextTokens) {
			break
		}
		if firstRecord < len(records) {
			cost -= agentfleet.EstimateTokens(records[firstRecord])
			firstRecord++
			continue
		}
		if start >= len(pairs)-1 {
			break
		}
		cost -= agentfleet.EstimateTokens(pairs[start][:])
		start++
		dropped = droppedTurns(run, turns, start, p.coveredTurns)
	}

	n := 3 + 2*len(records) + 2*(len(pairs)-start) + 2
	if p.summary != nil {
		n++
	}
	msgs := make([]agentfleet.ChatMessage, 0, n)
	msgs = append(msgs, agentfleet.ChatMessage{Role: agentfleet.RoleSystem, Content: p.system})
	if p.summary != nil {
		msgs = append(msgs, agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: p.summary.Content})
	}
	if firstRecord > 0 {
		msgs = append(msgs, agentfleet.ChatMessage{
			Role:    agentfleet.RoleUser,
			Content: fmt.Sprintf("[%d earlier run(s) of this session omitted to fit the context]", firstRecord),
		})
	}
	for _, r := range records[firstRecord:] {
		msgs = append(msgs, r...)
	}
	msgs = append(msgs, p.task)
	if dropped > 0 {
		msgs = append(msgs, agentfleet.ChatMessage{
			Role:    agentfleet.RoleUser,
			Content: fmt.Sprintf("[%d earlier turn(s) omitted to fit the context; args still carries their result]", dropped),
		})
	}
	for _, pr := range pairs[start:] {
		msgs = append(msgs, pr[0], pr[1])
	}
	return conversation{messages: msgs, dropped: dropped, trimmed: start, trimmedRuns: firstRecord, budget: contextTokens}
}

// droppedTurns counts the run's turns before turns[start] that the prompt
// leaves out (outside the history window or trimmed), not counting the
// first covered ones a summary holds.
func droppedTurns(run *agentfleet.Run, turns []turnHistory, start, covered int) int {
	first := run.Turn + 1
	if start < len(turns) {
		first = turns[start].turn
	}
	return max(first-1-covered, 0)
}

// markerTokens is what a message saying what was omitted costs at most;
// messageTokens what any message costs beyond its text (as
// agentfleet.EstimateTokens counts).
const (
	markerTokens  = 32
	messageTokens = 4
)

// sessionRecord renders an earlier run of the session: its message, the
// prose of its turns with their scripts elided, their logs within logCap
// characters, and its answer or error. through >= 0 says a summary in
// this run covers its message and turns through that one.
func sessionRecord(r *SessionRun, through, logCap int) []agentfleet.ChatMessage {
	var rec record
	if through < 0 {
		rec.add(agentfleet.RoleUser, r.Run.Message)
	}
	turns, _ := splitSteps(r.Steps)
	logLeft := logCap
	repliedAnswer := false
	for i, t := range turns {
		if t.turn <= through {
			continue
		}
		reply := t.reply
		if t.hasScript {
			reply = elide(reply, t.script, t.turn)
		} else if i == len(turns)-1 && r.Run.Status == agentfleet.StatusCompleted {
			repliedAnswer = true // a reply without code is the answer
		}
		rec.add(agentfleet.RoleAssistant, reply)
		logs := observationLogs(t.observation)
		if logs == "" {
			continue
		}
		if logLeft <= 0 {
			continue
		}
		if len(logs) > logLeft {
			cut := len(logs) - logLeft
			logs = truncateUTF8(logs, logLeft) + fmt.Sprintf("\n[%d more characters of log cut]", cut)
		}
		logLeft -= len(logs)
		rec.add(agentfleet.RoleUser, observationLog+logs)
	}
	if end := runEnd(&r.Run, repliedAnswer); end != "" {
		rec.add(agentfleet.RoleAssistant, end)
	}
	return rec.msgs
}

// runEnd is how an earlier run ended, as its record closes: its answer
// (unless its last reply was the answer) or its status and error.
func runEnd(run *agentfleet.Run, repliedAnswer bool) string {
	switch {
	case run.Status == agentfleet.StatusCompleted && repliedAnswer:
		return ""
	case run.Status == agentfleet.StatusCompleted:
		if !hasValue(run.Answer) {
			return ""
		}
		return "Answer: " + clip(answerText(run.Answer), SessionAnswerMaxChars)
	case run.Error != "":
		return fmt.Sprintf("[run ended %s: %s]", run.Status, clip(run.Error, SessionAnswerMaxChars))
	default:
		return fmt.Sprintf("[run ended %s]", run.Status)
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncateUTF8(s, n) + digestEllipsis
}

// record is the messages of an earlier run, consecutive messages of one
// role joined into one.
type record struct{ msgs []agentfleet.ChatMessage }

func (r *record) add(role, content string) {
	if content == "" {
		return
	}
	if n := len(r.msgs); n > 0 && r.msgs[n-1].Role == role {
		r.msgs[n-1].Content += "\n" + content
		return
	}
	r.msgs = append(r.msgs, agentfleet.ChatMessage{Role: role, Content: content})
}
