package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the result of one bench: what ran where, the figures, and the
// checks that decide the exit status. Its JSON form is what
// `agentctl bench --json` prints.
type Report struct {
	Scenario   string     `json:"scenario"`
	Parameters Parameters `json:"parameters"`
	Machine    Machine    `json:"machine"`
	StartedAt  time.Time  `json:"started_at"`
	// Elapsed is the whole bench, fleet start and checks included.
	Elapsed Duration `json:"elapsed"`
	Figures Figures  `json:"figures"`
	Checks  []Check  `json:"checks"`
	Notes   []string `json:"notes,omitempty"`
}

// Parameters are the settings a bench ran with, defaults applied.
type Parameters struct {
	// Mode is "embedded" (a fleet in this process), "url" (an existing
	// fleet) or "processes" (a fleet of processes started by the bench).
	Mode string `json:"mode"`
	// Store is "sqlite" or "postgres" ("" when driving a fleet by URL);
	// NATS is "embedded", "process" or "external".
	Store        string   `json:"store,omitempty"`
	NATS         string   `json:"nats,omitempty"`
	Runs         int      `json:"runs"`
	Turns        int      `json:"turns"`
	ModelLatency Duration `json:"model_latency"`
	Workers      int      `json:"workers,omitempty"`
	Slots        int      `json:"slots,omitempty"`
	Submitters   int      `json:"submitters,omitempty"`
	MaxWaiting   int      `json:"max_waiting,omitempty"`
	// GOMAXPROCS of each process of a spawned fleet; negative: Go's
	// default.
	GOMAXPROCS       int      `json:"gomaxprocs,omitempty"`
	ReadyDepth       int      `json:"ready_depth,omitempty"`
	AckWait          Duration `json:"ack_wait,omitempty"`
	PromptTokens     int      `json:"prompt_tokens,omitempty"`
	CompletionTokens int      `json:"completion_tokens,omitempty"`
	Fail429          int      `json:"fail_429,omitempty"`
	Fail500          int      `json:"fail_500,omitempty"`
	Warmup           int      `json:"warmup_runs,omitempty"`
	BRuns            int      `json:"b_runs,omitempty"`
	// Tracing is "otlp-stub" when the fleet exported traces to the
	// bench's stub collector, else empty (off).
	Tracing string `json:"tracing,omitempty"`
	// SideEffects: every turn POSTs once and calls ai() once.
	SideEffects bool `json:"side_effects,omitempty"`
	// Secrets each tenant holds (Config.Secrets).
	Secrets int `json:"secrets,omitempty"`
	// Stream is the fleet's AGENTFLEET_MODEL_STREAM.
	Stream string `json:"stream,omitempty"`
}

// Figures are the measurements; which are set depends on the scenario.
type Figures struct {
	Runs       RunCounts          `json:"runs"`
	Throughput *ThroughputFigures `json:"throughput,omitempty"`
	Latency    *LatencyFigures    `json:"latency,omitempty"`
	Scale      *ScaleFigures      `json:"scale,omitempty"`
	Fairness   *FairnessFigures   `json:"fairness,omitempty"`
	Chaos      *ChaosFigures      `json:"chaos,omitempty"`
	Fanout     *FanoutFigures     `json:"fanout,omitempty"`
	Webhooks   *WebhookFigures    `json:"webhooks,omitempty"`
	Batch      *BatchFigures      `json:"batch,omitempty"`
	Session    *SessionFigures    `json:"session,omitempty"`
	Tools      *ToolsFigures      `json:"tools,omitempty"`
	// Effects is what the side-effect target and the usage ledger saw
	// (with Config.SideEffects).
	Effects *EffectFigures `json:"side_effects,omitempty"`
	// Tracing is what the OTLP stub received (with --trace-stub).
	Tracing *TracingFigures `json:"tracing,omitempty"`
}

// TracingFigures: the spans the fleet exported to the bench's OTLP stub
// until the figures were taken (the exporters flush in batches: the
// last few seconds' spans may still be on their way).
type TracingFigures struct {
	Exports int64 `json:"exports"`
	Spans   int64 `json:"spans"`
	Bytes   int64 `json:"bytes"`
	// Refused exports would not parse as OTLP protobuf.
	Refused int64 `json:"refused,omitempty"`
}

// RunCounts says what became of the measured runs.
type RunCounts struct {
	Submitted int `json:"submitted"`
	// SubmitErrors are submissions the API refused or that failed
	// after retries; those runs never existed.
	SubmitErrors int `json:"submit_errors"`
	// Completed runs ended completed with the expected answer after the
	// expected number of turns.
	Completed int `json:"completed"`
	// Failed runs ended otherwise (failed, cancelled, max turns, or a
	// wrong answer).
	Failed int `json:"failed"`
	// Lost runs were accepted but never ended (or vanished).
	Lost int `json:"lost"`
	// Turns is the turns of the completed runs.
	Turns int `json:"turns"`
	// FailedExamples are a few failed or lost runs, for diagnosis.
	FailedExamples []string `json:"failed_examples,omitempty"`
}

// ThroughputFigures: N runs of T turns on an instant model.
type ThroughputFigures struct {
	// Wall is from the first submission to the last completion.
	Wall        Duration `json:"wall"`
	TurnsPerSec float64  `json:"turns_per_sec"`
	RunsPerSec  float64  `json:"runs_per_sec"`
	// SubmitWall is how long submitting all runs took.
	SubmitWall Duration `json:"submit_wall"`
	// CPUPerTurn is CPU time (this process and its descendants: the
	// fleet, its sandbox processes, spawned fleet processes) over the
	// measured window, divided by the turns. Absent when the fleet is
	// not this process's (--url).
	CPUPerTurn *Duration `json:"cpu_per_turn,omitempty"`
	// CPUPerTurnSelf and CPUPerTurnChildren split it: this process
	// (embedded: the fleet with the fake model and the client;
	// processes: only the bench) and its descendants (sandbox
	// processes; processes: the whole fleet).
	CPUPerTurnSelf     *Duration `json:"cpu_per_turn_self,omitempty"`
	CPUPerTurnChildren *Duration `json:"cpu_per_turn_children,omitempty"`
	CPUTotal           *Duration `json:"cpu_total,omitempty"`
	// CPUPerTurnByProcess splits the fleet's share of a fleet of
	// processes by role: nats, dispatcher, worker, sandbox.
	CPUPerTurnByProcess map[string]Duration `json:"cpu_per_turn_by_process,omitempty"`
	// CPUPerTurnPostgres is the local Postgres server's CPU per turn
	// (all its processes), when the store is Postgres on this machine.
	CPUPerTurnPostgres *Duration `json:"cpu_per_turn_postgres,omitempty"`
	// SwitchesPerTurn is how often the threads of this process and of
	// its descendants gave up a CPU (context switches, voluntary or not)
	// over the measured window, per turn: the wake-ups a turn costs,
	// which a virtual machine can make dear. SwitchesPerTurnSelf and
	// SwitchesPerTurnChildren split it as CPUPerTurn's parts do, and
	// SwitchesPerTurnByProcess as CPUPerTurnByProcess does (threads of
	// live processes only).
	SwitchesPerTurn          *float64           `json:"context_switches_per_turn,omitempty"`
	SwitchesPerTurnSelf      *float64           `json:"context_switches_per_turn_self,omitempty"`
	SwitchesPerTurnChildren  *float64           `json:"context_switches_per_turn_children,omitempty"`
	SwitchesPerTurnByProcess map[string]float64 `json:"context_switches_per_turn_by_process,omitempty"`
	// CPUUtilisation is CPUTotal over Wall, in cores.
	CPUCores *float64 `json:"cpu_cores,omitempty"`
	// ModelCalls is the replies the fake model served (one per turn,
	// plus any retried or repeated call).
	ModelCalls int `json:"model_calls"`
}

// LatencyFigures: runs one at a time on an idle fleet.
type LatencyFigures struct {
	// SubmitToFirstModelRequest: from POST /v1/runs to the fake model
	// receiving the run's first request.
	SubmitToFirstModelRequest Summary `json:"submit_to_first_model_request"`
	// TurnToNextTurn: from the model's reply to turn k leaving the fake
	// server to its request for turn k+1 of the same run (the turn's
	// script, commit, publish, scheduling and the next pull).
	TurnToNextTurn Summary `json:"turn_to_next_turn"`
	// CommitToSSE and CommitToNATS: from an event's ts to its arrival at
	// an SSE client (GET /v1/runs/{id}/events) and at a NATS subscriber
	// (bus.SubscribeEvents). An event's ts is set when the turn's events
	// are made, just before the commit, so these are upper bounds of
	// commit-to-delivery.
	CommitToSSE  Summary  `json:"commit_to_sse"`
	CommitToNATS *Summary `json:"commit_to_nats,omitempty"`
	// SubmitToDone: from POST to the done event at the SSE client.
	SubmitToDone Summary `json:"submit_to_done"`
	// ChunkToSSE and ChunkToNATS: from a streamed chunk of a model reply
	// leaving the fake model (just before its write) to its
	// response_chunk event at the SSE client and at a NATS subscriber of
	// the tenant's chunks (bus.SubscribeChunks); absent when the model
	// did not stream.
	ChunkToSSE  *Summary `json:"chunk_to_sse,omitempty"`
	ChunkToNATS *Summary `json:"chunk_to_nats,omitempty"`
}

// ScaleFigures: K runs in flight at once on a slow model.
type ScaleFigures struct {
	InFlightTarget int `json:"in_flight_target"`
	// PeakInFlight is the most model requests the fake model held at
	// once; RampTime how long after the first submission all the first
	// turns were in flight (absent if they never were).
	PeakInFlight int       `json:"peak_in_flight"`
	RampTime     *Duration `json:"ramp_time,omitempty"`
	Wall         Duration  `json:"wall"`
	TurnsPerSec  float64   `json:"turns_per_sec"`
	// IdleRSS is this process and its descendants after a warm-up,
	// before submitting; PeakRSS the most while the runs were in flight.
	IdleRSS int64 `json:"idle_rss_bytes"`
	PeakRSS int64 `json:"peak_rss_bytes"`
	// RSSPerInFlightTurn = (PeakRSS - IdleRSS) / InFlightTarget.
	RSSPerInFlightTurn int64 `json:"rss_per_in_flight_turn_bytes"`
	// GoroutinesPeak is this process's goroutines at the peak;
	// HeapObjectsPeak and StacksPeak its Go heap objects and goroutine
	// stacks then (runtime/metrics), to tell where the memory went.
	GoroutinesPeak  int   `json:"goroutines_peak"`
	HeapObjectsPeak int64 `json:"heap_objects_peak_bytes"`
	StacksPeak      int64 `json:"stacks_peak_bytes"`

	idleHeap, idleStacks int64
}

// FairnessFigures: tenant B's few runs against tenant A's backlog.
type FairnessFigures struct {
	ARuns int `json:"a_runs"`
	BRuns int `json:"b_runs"`
	// BCompletion is each of B's runs' time from its submission to its
	// completion; BWorst the longest.
	BCompletion []Duration `json:"b_completion"`
	BWorst      Duration   `json:"b_worst"`
	BBound      Duration   `json:"b_bound"`
	// ATotal is from A's first submission to its last completion.
	ATotal Duration `json:"a_total"`
	// ABacklogAtB is A's runs not yet done when B submitted;
	// ADoneDuringB how many of them finished while B's ran.
	ABacklogAtB  int `json:"a_backlog_at_b"`
	ADoneDuringB int `json:"a_done_during_b"`
}

// ChaosFigures: a fleet of processes through crashes and restarts.
type ChaosFigures struct {
	// DoubleCommits counts turns with more than one model_call event
	// (a turn committed twice); SeqGaps runs whose event seq is not
	// dense 1..n.
	DoubleCommits int `json:"double_commits"`
	SeqGaps       int `json:"seq_gaps"`
	// ModelCalls are the requests the fake model received for the
	// measured runs; RepeatedCalls those beyond one per (run, turn):
	// calls in flight when a process died, made again.
	ModelCalls    int `json:"model_calls"`
	RepeatedCalls int `json:"repeated_calls"`
	// SchedulerFailover is the time from the dispatcher's SIGKILL until
	// its replacement schedules (agentfleet_scheduler_leading is 1 on its
	// metrics listener): the pause in first turns a dead dispatcher costs.
	SchedulerFailover Duration `json:"scheduler_failover"`
	// LongestPause, with a NATS cluster, is the longest time no model
	// call started while turns were due: the fleet's time without
	// scheduling through the node losses (each step's Pause says where).
	LongestPause Duration    `json:"longest_pause,omitempty"`
	Wall         Duration    `json:"wall"`
	Timeline     []ChaosStep `json:"timeline"`
}

// ChaosStep is one disruption.
type ChaosStep struct {
	At   Duration `json:"at"`
	What string   `json:"what"`
	// Took is how long the step took (a restart until ready).
	Took   Duration `json:"took"`
	Done   int      `json:"runs_done"`
	Note   string   `json:"note,omitempty"`
	Failed bool     `json:"failed,omitempty"`
	// Pause is the longest time no model call started from this step
	// until the next (NATS cluster chaos); InFlight the model calls in
	// flight when it began.
	Pause    *Duration `json:"pause,omitempty"`
	InFlight int       `json:"in_flight,omitempty"`
}

// Check is one pass/fail judgement of a bench. Timing checks compare a
// figure with a bound that depends on the machine; behaviour checks hold
// at any speed.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Timing bool   `json:"timing,omitempty"`
}

// Summary is a distribution of durations.
type Summary struct {
	N   int      `json:"n"`
	P50 Duration `json:"p50"`
	P90 Duration `json:"p90"`
	P99 Duration `json:"p99"`
	Max Duration `json:"max"`
	// Mean is there for comparisons across runs; percentiles are the
	// figures to read.
	Mean Duration `json:"mean"`
}

func summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) Duration {
		// Nearest rank: the smallest value with at least p of the
		// samples at or below it.
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return Duration(s[max(0, min(i, len(s)-1))])
	}
	return Summary{N: len(s), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: Duration(s[len(s)-1]), Mean: Duration(sum / time.Duration(len(s)))}
}

func (s Summary) String() string {
	if s.N == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  (n=%d)", s.P50, s.P90, s.P99, s.Max, s.N)
}

// Duration is a time.Duration that reads well in tables and is a number
// of milliseconds (with a fraction) in JSON.
type Duration time.Duration

func (d Duration) String() string {
	t := time.Duration(d)
	switch {
	case t == 0:
		return "0"
	case t < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(t)/float64(time.Microsecond))
	case t < time.Second:
		return fmt.Sprintf("%.2fms", float64(t)/float64(time.Millisecond))
	case t < 10*time.Second:
		return fmt.Sprintf("%.3fs", t.Seconds())
	default:
		return t.Round(10 * time.Millisecond).String()
	}
}

// MarshalJSON writes milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(d)/float64(time.Microsecond)) / 1000)
}

// UnmarshalJSON reads milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return err
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// byRole lists a figure of each fleet role present in m, "role value",
// in the order the fleet's processes start.
func byRole[V any](m map[string]V, format func(V) string) string {
	var parts []string
	for _, role := range []string{"nats", "dispatcher", "worker", "sandbox"} {
		if v, ok := m[role]; ok {
			parts = append(parts, role+" "+format(v))
		}
	}
	return strings.Join(parts, ", ")
}

func durPtr(d time.Duration) *Duration { v := Duration(d); return &v }

// ErrChecksFailed is returned (wrapped) by Report.Err when a check failed.
var ErrChecksFailed = errors.New("bench checks failed")

// Err is nil when every check passed.
func (r *Report) Err() error {
	var failed []string
	for _, c := range r.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrChecksFailed, strings.Join(failed, ", "))
}

func (r *Report) check(name string, ok bool, timing bool, format string, a ...any) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Timing: timing, Detail: fmt.Sprintf(format, a...)})
}

func (r *Report) note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// checkRuns adds the check every scenario makes: each submitted run
// completed correctly, none lost.
func (r *Report) checkRuns() {
	c := r.Figures.Runs
	r.check("all runs completed", c.Failed == 0 && c.Lost == 0 && c.SubmitErrors == 0 && c.Completed == c.Submitted, false,
		"%d submitted, %d completed, %d failed, %d lost, %d submit errors", c.Submitted, c.Completed, c.Failed, c.Lost, c.SubmitErrors)
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for a human.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprintf(format, a...)) }
	p, m, f := r.Parameters, r.Machine, r.Figures
	fmt.Fprintf(tw, "agentctl bench %s\n", r.Scenario)
	fleet := p.Mode
	if p.Store != "" || p.NATS != "" {
		fleet = fmt.Sprintf("%s (store %s, NATS %s)", p.Mode, orDash(p.Store), orDash(p.NATS))
	}
	row("fleet", "%s", fleet)
	if p.Workers > 0 {
		row("workers", "%d x %d slots", p.Workers, p.Slots)
	}
	switch {
	case p.GOMAXPROCS > 0:
		row("fleet GOMAXPROCS", "%d per process", p.GOMAXPROCS)
	case p.GOMAXPROCS < 0:
		row("fleet GOMAXPROCS", "Go's default per process")
	}
	row("runs", "%d x %d turns, model latency %s", p.Runs, p.Turns, p.ModelLatency)
	if p.Secrets > 0 {
		row("secrets", "%d per tenant, each value redacted from every turn", p.Secrets)
	}
	if p.Tracing != "" {
		row("tracing", "on, OTLP/HTTP to the bench's stub collector")
	}
	row("machine", "%s, GOMAXPROCS %d, %s %s/%s, load %.2f at start", m.CPUModel, m.GOMAXPROCS, m.GoVersion, m.OS, m.Arch, m.LoadAvg)
	c := f.Runs
	row("outcome", "%d submitted, %d completed, %d failed, %d lost", c.Submitted, c.Completed, c.Failed, c.Lost)
	if t := f.Throughput; t != nil {
		row("throughput", "%.0f turns/s, %.1f runs/s", t.TurnsPerSec, t.RunsPerSec)
		row("wall", "%s (first submit to last completion; submitting took %s)", t.Wall, t.SubmitWall)
		if t.CPUPerTurn != nil {
			row("CPU per turn", "%s = %s this process + %s its children (%s total, %.2f cores busy on average)",
				*t.CPUPerTurn, *t.CPUPerTurnSelf, *t.CPUPerTurnChildren, *t.CPUTotal, *t.CPUCores)
			if len(t.CPUPerTurnByProcess) > 0 {
				row("fleet CPU by process", "%s", byRole(t.CPUPerTurnByProcess, Duration.String))
			}
			if t.CPUPerTurnPostgres != nil {
				row("Postgres CPU per turn", "%s (the local server's processes)", *t.CPUPerTurnPostgres)
			}
			if t.SwitchesPerTurn != nil {
				row("switches per turn", "%.1f context switches = %.1f this process + %.1f its children",
					*t.SwitchesPerTurn, *t.SwitchesPerTurnSelf, *t.SwitchesPerTurnChildren)
			}
			if len(t.SwitchesPerTurnByProcess) > 0 {
				row("switches by process", "%s", byRole(t.SwitchesPerTurnByProcess, func(v float64) string { return fmt.Sprintf("%.1f", v) }))
			}
		}
		row("model calls", "%d", t.ModelCalls)
	}
	if b := f.Batch; b != nil {
		row("admission", "%d inputs in %s (%.0f/s), %d durable at the 202", b.Inputs, b.Admission, b.AdmittedPerSec, b.DurableAtAdmission)
		if b.AdmissionCPU != nil {
			pg := ""
			if b.AdmissionCPUPostgres != nil {
				pg = fmt.Sprintf(" + %s PostgreSQL", *b.AdmissionCPUPostgres)
			}
			row("admission CPU", "%s%s (the fleet and the bench's client)", *b.AdmissionCPU, pg)
		}
		row("batch run", "%.0f turns/s, %.1f runs/s over %s (202 to last completion)", b.TurnsPerSec, b.RunsPerSec, b.Wall)
		row("RSS idle / peak", "%s / %s (this process + its children)", mib(b.IdleRSS), mib(b.PeakRSS))
	}
	if se := f.Session; se != nil {
		se.rows(row)
	}
	if to := f.Tools; to != nil {
		to.rows(row)
	}
	if tr := f.Tracing; tr != nil {
		row("spans exported", "%d in %d exports, %s (%d refused)", tr.Spans, tr.Exports, mib(tr.Bytes), tr.Refused)
	}
	if l := f.Latency; l != nil {
		row("submit -> 1st model request", "%s", l.SubmitToFirstModelRequest)
		row("turn -> next turn", "%s", l.TurnToNextTurn)
		row("commit -> SSE client*", "%s", l.CommitToSSE)
		if l.CommitToNATS != nil {
			row("commit -> NATS subscriber*", "%s", *l.CommitToNATS)
		}
		row("submit -> done (SSE)", "%s", l.SubmitToDone)
		if l.ChunkToSSE != nil {
			row("chunk leaves model -> SSE", "%s", *l.ChunkToSSE)
		}
		if l.ChunkToNATS != nil {
			row("chunk leaves model -> NATS", "%s", *l.ChunkToNATS)
		}
		row("", "* from the event's ts, set just before the commit: upper bounds")
	}
	if s := f.Scale; s != nil {
		ramp := "never all at once"
		if s.RampTime != nil {
			ramp = "all in flight " + s.RampTime.String() + " after the first submission"
		}
		row("in flight", "peak %d of %d model calls at once (%s)", s.PeakInFlight, s.InFlightTarget, ramp)
		row("wall", "%s, %.0f turns/s", s.Wall, s.TurnsPerSec)
		row("RSS idle / peak", "%s / %s (this process + its children)", mib(s.IdleRSS), mib(s.PeakRSS))
		row("RSS per in-flight turn", "%.1f KiB", float64(s.RSSPerInFlightTurn)/1024)
		row("goroutines at peak", "%d", s.GoroutinesPeak)
	}
	if fa := f.Fairness; fa != nil {
		ds := make([]string, len(fa.BCompletion))
		for i, d := range fa.BCompletion {
			ds[i] = d.String()
		}
		row("B's runs done after", "%s (worst %s, bound %s)", strings.Join(ds, ", "), fa.BWorst, fa.BBound)
		row("A's total", "%s for %d runs", fa.ATotal, fa.ARuns)
		row("A during B", "%d of A's backlog of %d finished while B ran", fa.ADoneDuringB, fa.ABacklogAtB)
	}
	if fo := f.Fanout; fo != nil {
		row("children", "%d of %d parents, %d each", fo.Children, fo.Parents, fo.ChildrenPerParent)
		row("wall", "%s", fo.Wall)
		row("last child's end -> parent's next turn", "%s", fo.Resume)
	}
	if ef := f.Effects; ef != nil {
		row("side effects repeated", "%d of %d (sent again with their Idempotency-Key: %d; missing: %d; without a key: %d)", ef.Repeated, ef.Expected, ef.Resent, ef.Missing, ef.NoKey)
		row("model calls billed twice", "%d of %d billed (ai() calls: %d, made again: %d, replayed from the journal: %d)",
			ef.BilledTwice, ef.Billed, ef.AICalls, ef.AIRepeated, ef.AIReplayed)
	}
	if ch := f.Chaos; ch != nil {
		row("wall", "%s", ch.Wall)
		row("turns committed twice", "%d (seq gaps: %d runs)", ch.DoubleCommits, ch.SeqGaps)
		row("model calls repeated", "%d of %d", ch.RepeatedCalls, ch.ModelCalls)
		if ch.LongestPause > 0 {
			row("time without scheduling", "%s at most without a model call starting", ch.LongestPause)
		}
		if ch.SchedulerFailover > 0 {
			row("scheduler failover", "%s from the dispatcher's SIGKILL to its replacement scheduling", ch.SchedulerFailover)
		}
		for _, s := range ch.Timeline {
			status := ""
			if s.Failed {
				status = " FAILED"
			}
			note := ""
			if s.Note != "" {
				note = "; " + s.Note
			}
			if s.Pause != nil {
				note += fmt.Sprintf("; %d model calls in flight; then at most %s without a model call starting", s.InFlight, *s.Pause)
			}
			row("at "+s.At.String(), "%s (took %s, %d runs done)%s%s", s.What, s.Took, s.Done, status, note)
		}
	}
	if wh := f.Webhooks; wh != nil {
		paused := "the workers running meanwhile"
		if wh.WorkersPaused {
			paused = "no worker running: the intake alone"
		}
		row("intake burst", "%d of %d deliveries accepted in %s: %.0f/s (%s)", wh.Accepted, wh.Deliveries, wh.BurstWall, wh.AcceptedPerSec, paused)
		row("request -> 202", "%s (payload %d bytes)", wh.IntakeLatency, wh.PayloadBytes)
		if wh.CPUPerDelivery != nil {
			row("CPU per delivery", "%s (this process and its children, during the burst)", *wh.CPUPerDelivery)
			if len(wh.CPUPerDeliveryByProcess) > 0 {
				row("fleet CPU by process", "%s", byRole(wh.CPUPerDeliveryByProcess, Duration.String))
			}
			if wh.CPUPerDeliveryPostgres != nil {
				row("Postgres CPU per delivery", "%s (the local server's processes)", *wh.CPUPerDeliveryPostgres)
			}
		}
		row("retries", "%d of %d answered with their first run", wh.RetriesDeduped, wh.Retries)
		row("runs after the burst", "%s to complete them, %.0f runs/s", wh.RunsWall, wh.RunsPerSec)
	}
	for _, ch := range r.Checks {
		mark := "ok  "
		if !ch.OK {
			mark = "FAIL"
		}
		row("check", "%s %s: %s", mark, ch.Name, ch.Detail)
	}
	for _, n := range r.Notes {
		row("note", "%s", n)
	}
	for _, e := range c.FailedExamples {
		row("failed run", "%s", e)
	}
	row("elapsed", "%s", r.Elapsed)
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
