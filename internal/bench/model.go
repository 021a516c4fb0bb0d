package bench

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
)

// ModelName is the model the bench's fake server serves; a fleet driven
// with --url runs with AGENTFLEET_MODEL set to it (any name works).
const ModelName = "bench-model"

// taskRE reads a bench task: "bench <tag> run <i> of <turns> turns".
var taskRE = regexp.MustCompile(`^bench (\S+) run (\d+) of (\d+) turns$`)

// taskMessage is run i's task. The fake model reads everything it needs
// from it, so any fleet, in any process, can be driven by it.
func taskMessage(tag string, i, turns int) string {
	return fmt.Sprintf("bench %s run %d of %d turns", tag, i, turns)
}

// expectedAnswer is what run i of a bench task answers when every turn
// ran once, in order, with the state the previous one carried.
func expectedAnswer(i, turns int) string { return fmt.Sprintf("done %d %d", i, turns) }

// parseTask returns the tag, run index and turns of a bench task.
func parseTask(msg string) (tag string, i, turns int, ok bool) {
	// A run with a context (a webhook's) has its digest after the task.
	msg, _, _ = strings.Cut(msg, "\n")
	m := taskRE.FindStringSubmatch(msg)
	if m == nil {
		return "", 0, 0, false
	}
	i, _ = strconv.Atoi(m[2])
	turns, _ = strconv.Atoi(m[3])
	return m[1], i, turns, true
}

// reply is the model's answer to turn k (1-based) of run i of turns: a
// script that counts the turns in the carried state, and answers on the
// last. The answer therefore proves each turn ran once and its state was
// threaded to the next.
//
// With a side-effect target, each turn's script also POSTs to it and
// calls ai() once (effectScript).
func reply(tag string, i, k, turns, pad int, target string) string {
	var b strings.Builder
	if pad > 0 {
		// Prose before the code block: bytes the fleet stores, prompts
		// and streams like real model output.
		b.WriteString("Thinking:")
		for range pad {
			b.WriteString(" lore") // about one token each
		}
		b.WriteString("\n")
	}
	effects := ""
	if target != "" {
		effects = "\n" + effectScript(target, tag, i, k)
	}
	if k < turns {
		fmt.Fprintf(&b, "Step %d.\n```javascript\nfunction run(args) {%s var s = (args && args.step) || 0; return {run: %d, step: s + 1} }\n```", k, effects, i)
	} else {
		fmt.Fprintf(&b, "Done.\n```javascript\nfunction run(args) {%s var s = (args && args.step) || 0; answer('done %d ' + (s + 1)) }\n```", effects, i)
	}
	return b.String()
}

// ModelConfig shapes the fake model.
type ModelConfig struct {
	// Listen is the fake model's address (default 127.0.0.1:0).
	Listen string
	// Latency delays every reply.
	Latency time.Duration
	// PromptTokens and CompletionTokens are the usage each reply
	// reports (zero: the fleet's estimate from the text). Completion
	// tokens also pad the reply with about that many tokens of prose.
	PromptTokens     int
	CompletionTokens int
	// ChunkDelay and ChunkSize shape a streamed reply (fakeserver's):
	// the pause before each content chunk and its bytes (0: 16).
	ChunkDelay time.Duration
	ChunkSize  int
	// Fail429 and Fail500 make the first requests fail: Fail429 of them
	// with 429 and Retry-After RetryAfter (default "1"), then Fail500
	// with 500.
	Fail429    int
	Fail500    int
	RetryAfter string
	// keepRequests keeps every request the model received, for the
	// chaos scenario's count of repeated calls; other scenarios let the
	// model forget them, or a long bench would hold every prompt.
	keepRequests bool
}

// model is the OpenAI-wire fake model a bench drives its fleet with:
// fakeserver.Server with a Responder that plays bench tasks, counts what
// it served, and (for the latency scenario) timestamps each turn's
// request and reply.
type model struct {
	cfg ModelConfig
	srv *fakeserver.Server

	finals atomic.Int64 // replies to a run's last turn

	mu sync.Mutex
	// finalsByTag counts last-turn replies by task tag.
	finalsByTag map[string]int
	// Timing, when on: keyed by turnKey.
	timing   bool
	requests map[string]time.Time
	replies  map[string]time.Time
	// chunks is, by turnKey, when each streamed content chunk left and
	// the byte of the reply it ends at.
	chunks map[string][]chunkMark
	// gate, when set, is called before replying to a request (turn is
	// 1-based); the latency scenario holds a run's first reply until its
	// SSE stream is open.
	gate func(task string, turn int)
	// fanoutTag's tasks spawn fanoutChildren children and wait for them
	// (the fanout scenario).
	fanoutTag      string
	fanoutChildren int
	// effects is the side-effect target's URL ("": none); ai counts the
	// ai() requests by prompt.
	effects string
	ai      map[string]int
	// recording keeps every request served, in order of arrival, until
	// takeRecorded (the session scenario, whose runs go one at a time).
	recording atomic.Bool
	recorded  []recordedCall
	// summaries counts the summary calls served (IsSummaryCall).
	summaries atomic.Int64
}

// recordedCall is one request the model served while recording.
type recordedCall struct {
	messages []agentfleet.ChatMessage
	summary  bool
}

// setRecording starts or stops recording; either way it drops what was
// recorded.
func (m *model) setRecording(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recording.Store(on)
	m.recorded = nil
}

// takeRecorded returns the requests recorded since the last take.
func (m *model) takeRecorded() []recordedCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.recorded
	m.recorded = nil
	return out
}

func (m *model) setEffects(url string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.effects = url
}

// aiCalls counts the ai() requests of tasks tagged tag, and those beyond
// one per (run, turn).
func (m *model) aiCalls(tag string) (calls, repeated int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for prompt, n := range m.ai {
		if strings.HasPrefix(prompt, "effect "+tag+" ") {
			calls += n
			repeated += n - 1
		}
	}
	return calls, repeated
}

func (m *model) setFanout(tag string, children int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fanoutTag, m.fanoutChildren = tag, children
}

func turnKey(task string, turn int) string { return task + "#" + strconv.Itoa(turn) }

// chunkMark is one streamed piece of a reply: the reply's bytes up to
// end left at at.
type chunkMark struct {
	end int
	at  time.Time
}

// chunkSent notes when a streamed chunk of a bench turn left, while
// timing is on: where its trip to the subscribers starts.
func (m *model) chunkSent(r fakeserver.Request, _ int, piece string) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.timing {
		return
	}
	k := 1
	for _, msg := range r.Messages {
		if msg.Role == agentfleet.RoleAssistant {
			k++
		}
	}
	key := turnKey(r.FirstUser(), k)
	marks := m.chunks[key]
	end := len(piece)
	if n := len(marks); n > 0 {
		end += marks[n-1].end
	}
	m.chunks[key] = append(marks, chunkMark{end: end, at: now})
}

// chunkAt is when the byte at offset of turn k's reply to task left the
// fake model: a fleet chunk that starts there waited since then (the
// fleet may join pieces into one chunk).
func (m *model) chunkAt(task string, k, offset int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.chunks[turnKey(task, k)] {
		if c.end > offset {
			return c.at, true
		}
	}
	return time.Time{}, false
}

func startModel(cfg ModelConfig) (*model, error) {
	m := &model{cfg: cfg, finalsByTag: map[string]int{}, requests: map[string]time.Time{}, replies: map[string]time.Time{},
		chunks: map[string][]chunkMark{}, ai: map[string]int{}}
	srv, err := fakeserver.Start(fakeserver.Config{
		Addr: cfg.Listen, Responder: m.respond, Model: ModelName, Latency: cfg.Latency, Forget: !cfg.keepRequests,
		ChunkDelay: cfg.ChunkDelay, ChunkSize: cfg.ChunkSize, OnChunk: m.chunkSent,
	})
	if err != nil {
		return nil, err
	}
	m.srv = srv
	if cfg.Fail429 > 0 {
		ra := cfg.RetryAfter
		if ra == "" {
			ra = "1"
		}
		srv.Inject(fakeserver.Fault{Status: http.StatusTooManyRequests, RetryAfter: ra, Times: cfg.Fail429})
	}
	if cfg.Fail500 > 0 {
		srv.Inject(fakeserver.Fault{Status: http.StatusInternalServerError, Times: cfg.Fail500})
	}
	return m, nil
}

// URL is the base URL a fleet's workers use (OPENAI_BASE_URL).
func (m *model) URL() string { return m.srv.URL() }

func (m *model) close() { _ = m.srv.Close() }

func (m *model) setTiming(on bool, gate func(task string, turn int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timing, m.gate = on, gate
}

// respond plays a bench task. It runs after the server's latency.
func (m *model) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	arrived := time.Now().Add(-m.cfg.Latency)
	summary := IsSummaryCall(r.Messages)
	if m.recording.Load() {
		m.mu.Lock()
		m.recorded = append(m.recorded, recordedCall{messages: r.Messages, summary: summary})
		m.mu.Unlock()
	}
	if summary {
		// Before any task is read: a summary call's prompt quotes the
		// tasks it summarizes, and must not be answered as one of them.
		m.summaries.Add(1)
		return m.withUsage(r, summaryReply(r.Messages))
	}
	if text, ok := m.scripted(r.Messages); ok {
		return m.withUsage(r, text)
	}
	if text, ok := toolsReply(r.Messages); ok {
		return m.withUsage(r, text)
	}
	task := r.FirstUser()
	if strings.HasPrefix(task, "effect ") {
		m.mu.Lock()
		m.ai[task]++
		m.mu.Unlock()
		return "ok", agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(r.Messages), CompletionTokens: 1}, nil
	}
	tag, i, turns, ok := parseTask(task)
	if !ok {
		// Not ours (a fleet shared with other traffic): a reply without
		// code ends the run.
		return "This model only plays agentctl bench tasks.", agentfleet.Usage{}, nil
	}
	k := 1
	for _, msg := range r.Messages {
		if msg.Role == agentfleet.RoleAssistant {
			k++
		}
	}
	m.mu.Lock()
	timing, gate := m.timing, m.gate
	fanout := m.fanoutTag != "" && tag == m.fanoutTag
	children := m.fanoutChildren
	target := m.effects
	if timing {
		if _, seen := m.requests[turnKey(task, k)]; !seen {
			m.requests[turnKey(task, k)] = arrived
		}
	}
	m.mu.Unlock()
	if gate != nil {
		gate(task, k)
	}
	text := reply(tag, i, k, turns, m.cfg.CompletionTokens, target)
	if fanout {
		text = fanoutReply(tag, i, k, children)
	}
	_, usage, _ := m.withUsage(r, text)
	if k >= turns {
		m.finals.Add(1)
		m.mu.Lock()
		m.finalsByTag[tag]++
		m.mu.Unlock()
	}
	if timing {
		m.mu.Lock()
		m.replies[turnKey(task, k)] = time.Now()
		m.mu.Unlock()
	}
	return text, usage, nil
}

// withUsage returns text with the usage a reply reports: the configured
// token counts, or else the estimates from the prompt and the text.
func (m *model) withUsage(r fakeserver.Request, text string) (string, agentfleet.Usage, error) {
	usage := agentfleet.Usage{PromptTokens: int64(m.cfg.PromptTokens), CompletionTokens: int64(m.cfg.CompletionTokens)}
	if usage.PromptTokens == 0 {
		usage.PromptTokens = agentfleet.EstimateTokens(r.Messages)
	}
	if usage.CompletionTokens == 0 {
		usage.CompletionTokens = agentfleet.EstimateTextTokens(text)
	}
	return text, usage, nil
}

// finalsOf is the last-turn replies served for tasks tagged tag.
func (m *model) finalsOf(tag string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.finalsByTag[tag]
}

// requestAt is when turn k's first request arrived, replyAt when its
// last reply left.
func (m *model) requestAt(task string, k int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.requests[turnKey(task, k)]
	return t, ok
}

func (m *model) replyAt(task string, k int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.replies[turnKey(task, k)]
	return t, ok
}

// served is the number of model replies served (turns' calls), inflight
// the requests received and not yet answered (faults answered count as
// answered only through Requests, so injected faults skew it upward by
// their number).
func (m *model) served() int { return m.srv.Completions() }

func (m *model) inflight() int { return max(0, m.srv.Requests()-m.srv.Completions()) }

// repeatedCalls counts model calls beyond one per (task, turn): what a
// provider would have billed twice.
func (m *model) repeatedCalls(tag string) (calls, repeated int) {
	per := map[string]int{}
	for _, r := range m.srv.Received() {
		task := r.FirstUser()
		if !strings.HasPrefix(task, "bench "+tag+" ") {
			continue
		}
		k := 1
		for _, msg := range r.Messages {
			if msg.Role == agentfleet.RoleAssistant {
				k++
			}
		}
		per[turnKey(task, k)]++
		calls++
	}
	for _, n := range per {
		repeated += n - 1
	}
	return calls, repeated
}
