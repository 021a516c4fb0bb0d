package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet/internal/bench"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/scheduler"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The HTTP transports and the embedded NATS server keep a few
		// package-level goroutines alive past each test.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		// A stream (a lease's KV bucket) that a JetStream API request
		// still in flight creates while its server shuts down is not yet
		// in its account's list, so the shutdown never stops its store:
		// the store's flush loop and the access-time service it holds
		// outlive the server (nats-server 2.15, stream.go addStream).
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
		goleak.Cleanup(func(code int) {
			if agentctl.dir != "" {
				_ = os.RemoveAll(agentctl.dir)
			}
			os.Exit(code)
		}),
	)
}

// run runs a bench at a tiny size and checks what holds for every
// report: it ran, every behaviour check passed (timing checks depend on
// the machine and the race detector, so they are only reported), every
// run completed, and the report renders as a table and as JSON with the
// promised top-level keys.
func run(t *testing.T, cfg bench.Config) *bench.Report {
	t.Helper()
	var progress bytes.Buffer
	cfg.Progress = &progress
	if os.Getenv("AGENTFLEET_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	rep, err := bench.Run(context.Background(), cfg)
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	t.Logf("\n%s", table.String())
	for _, c := range rep.Checks {
		if !c.Timing {
			require.True(t, c.OK, "check %q: %s", c.Name, c.Detail)
		}
	}
	runs := rep.Figures.Runs
	require.Positive(t, runs.Submitted)
	require.Equal(t, runs.Submitted, runs.Completed, "failed examples: %v", runs.FailedExamples)
	require.Zero(t, runs.Failed)
	require.Zero(t, runs.Lost)
	require.Zero(t, runs.SubmitErrors)
	require.Equal(t, runs.Completed*rep.Parameters.Turns, runs.Turns)

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var obj map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(js.Bytes(), &obj))
	for _, k := range []string{"scenario", "parameters", "machine", "figures", "checks"} {
		require.Contains(t, obj, k)
	}
	var back bench.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Scenario, back.Scenario)
	require.Equal(t, rep.Figures.Runs, back.Figures.Runs)
	require.Positive(t, back.Machine.GOMAXPROCS)
	require.NotEmpty(t, back.Machine.GoVersion)
	return rep
}

func requireOrdered(t *testing.T, name string, s bench.Summary, n int) {
	t.Helper()
	if n > 0 {
		require.Equal(t, n, s.N, name)
	} else {
		require.Positive(t, s.N, name)
	}
	require.LessOrEqual(t, s.P50, s.P90, name)
	require.LessOrEqual(t, s.P90, s.P99, name)
	require.LessOrEqual(t, s.P99, s.Max, name)
	require.Positive(t, s.Max, name)
}

func TestThroughput(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Throughput, Runs: 20, Warmup: 4, Slots: 8, ModelLatency: bench.LatencyDefault})
	require.Equal(t, "embedded", rep.Parameters.Mode)
	require.Equal(t, 20, rep.Figures.Runs.Completed)
	f := rep.Figures.Throughput
	require.NotNil(t, f)
	require.Positive(t, f.TurnsPerSec)
	require.InDelta(t, 2*f.RunsPerSec, f.TurnsPerSec, 1e-6, "2 turns per run")
	require.Positive(t, f.Wall)
	require.GreaterOrEqual(t, f.ModelCalls, 40)
	require.NotNil(t, f.CPUPerTurn, "the fleet is this process: CPU is measured")
	require.Positive(t, *f.CPUPerTurn)
	require.NotNil(t, f.SwitchesPerTurn, "and its context switches")
	require.Positive(t, *f.SwitchesPerTurnSelf)
	require.Positive(t, *f.SwitchesPerTurnChildren, "the sandbox processes wake for every turn")
	require.InDelta(t, *f.SwitchesPerTurn, *f.SwitchesPerTurnSelf+*f.SwitchesPerTurnChildren, 1e-9)
}

// With --trace-stub the fleet exports its traces to the bench's stub
// collector: every span of every run arrives by the fleet's shutdown.
func TestThroughputTraced(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Throughput, Runs: 20, Warmup: 4, Slots: 8, TraceStub: true})
	require.Equal(t, 20, rep.Figures.Runs.Completed)
	require.Equal(t, "otlp-stub", rep.Parameters.Tracing)
	tr := rep.Figures.Tracing
	require.NotNil(t, tr)
	require.Zero(t, tr.Refused)
	// A run of 2 turns: invoke_agent, admit_run, and per turn the turn,
	// its model call and its script.
	require.EqualValues(t, (20+4)*(2+3*2), tr.Spans)
	require.Positive(t, tr.Bytes)
	_, set := os.LookupEnv("OTEL_EXPORTER_OTLP_ENDPOINT")
	require.False(t, set, "the environment is put back")
}

// TestThroughputThroughModelFailures: the fleet's model client retries
// 429s (honouring Retry-After) and 500s, so injected failures cost time,
// never a run.
func TestThroughputThroughModelFailures(t *testing.T) {
	rep := run(t, bench.Config{
		Scenario: bench.Throughput, Runs: 20, Turns: 3, Warmup: -1, Slots: 4,
		Model: bench.ModelConfig{Fail429: 3, RetryAfter: "0", Fail500: 2, CompletionTokens: 50},
	})
	require.Equal(t, 20, rep.Figures.Runs.Completed)
	require.Equal(t, 60, rep.Figures.Runs.Turns)
	require.Equal(t, 50, rep.Parameters.CompletionTokens)
}

func TestLatency(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Latency, Runs: 10, Warmup: 2, ModelLatency: bench.LatencyDefault})
	l := rep.Figures.Latency
	require.NotNil(t, l)
	requireOrdered(t, "submit to first request", l.SubmitToFirstModelRequest, 10)
	requireOrdered(t, "turn to next turn", l.TurnToNextTurn, 10) // 2 turns: one gap per run
	requireOrdered(t, "submit to done", l.SubmitToDone, 10)
	requireOrdered(t, "commit to SSE", l.CommitToSSE, 0)
	require.NotNil(t, l.CommitToNATS, "an embedded fleet has a NATS URL to subscribe to")
	requireOrdered(t, "commit to NATS", *l.CommitToNATS, 0)
	// Each run's live events reach both consumers: at least
	// model_call..done of two turns.
	require.GreaterOrEqual(t, l.CommitToSSE.N, 10*4)
	require.GreaterOrEqual(t, l.CommitToNATS.N, l.CommitToSSE.N)
}

func TestFanout(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Fanout, Runs: 6, Warmup: 1})
	fo := rep.Figures.Fanout
	require.NotNil(t, fo)
	require.Equal(t, 6*bench.FanoutChildren, fo.Children)
	requireOrdered(t, "resume", fo.Resume, 6)
}

// The batch scenario admits one batch, checks every run was durable at
// the 202, and runs them all.
func TestBatch(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Batch, Runs: 300, Warmup: 1})
	b := rep.Figures.Batch
	require.NotNil(t, b)
	require.Equal(t, 300, b.Inputs)
	require.Equal(t, 300, b.DurableAtAdmission)
	require.Positive(t, b.TurnsPerSec)
	require.Positive(t, b.Admission)
	require.GreaterOrEqual(t, b.PeakRSS, b.IdleRSS)
}

func TestScale(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Scale, Runs: 50, ModelLatency: 300 * time.Millisecond, Warmup: 4})
	require.Equal(t, 50, rep.Parameters.Slots, "one slot per run by default")
	s := rep.Figures.Scale
	require.NotNil(t, s)
	require.Equal(t, 50, s.InFlightTarget)
	require.Positive(t, s.PeakInFlight)
	require.LessOrEqual(t, s.PeakInFlight, 50)
	require.Positive(t, s.IdleRSS)
	require.GreaterOrEqual(t, s.PeakRSS, s.IdleRSS)
}

func TestFairness(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Fairness, Runs: 30, ModelLatency: bench.LatencyDefault, Warmup: -1})
	f := rep.Figures.Fairness
	require.NotNil(t, f)
	require.Equal(t, 34, rep.Figures.Runs.Completed)
	require.Len(t, f.BCompletion, 4)
	for i, d := range f.BCompletion {
		require.Positive(t, d, "B's run %d", i)
		require.LessOrEqual(t, d, f.BWorst)
	}
	require.Positive(t, f.ATotal)
	require.GreaterOrEqual(t, f.ADoneDuringB, 0)
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos builds agentctl and runs a fleet of processes")
	}
	dbURL, schema := pgtest.Schema(t)
	exe := buildAgentctl(t)
	rep := run(t, bench.Config{
		Scenario: bench.Chaos, Runs: 40, Workers: 2, Slots: 4, ModelLatency: bench.LatencyDefault,
		AckWait: 2 * time.Second, DatabaseURL: dbURL, Schema: schema, Executable: exe,
	})
	require.Equal(t, "processes", rep.Parameters.Mode)
	require.Equal(t, bench.SpawnGOMAXPROCS(runtime.NumCPU(), 2), rep.Parameters.GOMAXPROCS)
	c := rep.Figures.Chaos
	require.NotNil(t, c)
	require.Zero(t, c.DoubleCommits)
	require.Zero(t, c.SeqGaps)
	require.GreaterOrEqual(t, c.ModelCalls, 40*3)
	require.Equal(t, c.ModelCalls-40*3, c.RepeatedCalls, "every call beyond one per turn is a repeat")
	var what []string
	for _, s := range c.Timeline {
		require.False(t, s.Failed, "%s: %s", s.What, s.Note)
		what = append(what, s.What)
	}
	require.Equal(t, []string{
		"SIGKILL worker 1, start a replacement",
		"restart the NATS server (SIGTERM, same port and store)",
		"SIGKILL the NATS server, start it again (same port and store)",
		"restart Postgres",
		"SIGKILL the dispatcher mid-submission, start another",
	}, what)
	require.Contains(t, c.Timeline[3].Note, "skipped", "no --pg-restart-cmd: Postgres is not restarted")
	require.Regexp(t, `^[1-9]\d* of the last 8 runs submitted before it`, c.Timeline[4].Note)
	// The replacement dispatcher finds the dead one's lease holder silent
	// and takes over: well before the lease's TTL would have let it.
	require.Positive(t, c.SchedulerFailover)
	require.Less(t, time.Duration(c.SchedulerFailover), scheduler.LeaseTTLDefault/2, "scheduler failover")
	require.Equal(t, 40, rep.Figures.Runs.Submitted, "the runs the dead dispatcher dropped were submitted again")
	require.Zero(t, rep.Figures.Runs.SubmitErrors)
	requireEffectsOnce(t, rep, 40*3)
}

// requireEffectsOnce checks a side-effect bench: every turn's POST
// arrived once with its key, every model call (each turn's reply and its
// script's ai()) was billed once.
func requireEffectsOnce(t *testing.T, rep *bench.Report, turns int) {
	t.Helper()
	require.True(t, rep.Parameters.SideEffects)
	ef := rep.Figures.Effects
	require.NotNil(t, ef)
	require.Equal(t, turns, ef.Expected)
	require.Zero(t, ef.Repeated, "side effects repeated")
	require.Zero(t, ef.Missing)
	require.Zero(t, ef.NoKey)
	require.GreaterOrEqual(t, ef.AICalls, turns)
	require.GreaterOrEqual(t, ef.Billed, 2*turns, "a reply and an ai() per turn")
}

// With --side-effects each turn's script POSTs to the bench's target and
// calls ai(): each POST arrives once, each call is billed once.
func TestThroughputSideEffects(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Throughput, Runs: 20, Warmup: 4, Slots: 8, ModelLatency: bench.LatencyDefault, SideEffects: true})
	require.Equal(t, 20, rep.Figures.Runs.Completed)
	requireEffectsOnce(t, rep, 40)
}

func TestClusterChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos builds agentctl and runs a fleet of processes on a NATS cluster")
	}
	dbURL, schema := pgtest.Schema(t)
	rep := run(t, bench.Config{
		Scenario: bench.Chaos, NATSCluster: 3, Runs: 30, Workers: 2, Slots: 4, ModelLatency: bench.LatencyDefault,
		AckWait: 2 * time.Second, DatabaseURL: dbURL, Schema: schema, Executable: buildAgentctl(t),
	})
	require.Contains(t, rep.Parameters.NATS, "cluster of 3")
	c := rep.Figures.Chaos
	require.NotNil(t, c)
	require.Zero(t, c.DoubleCommits)
	require.Len(t, c.Timeline, 2)
	for _, s := range c.Timeline {
		require.False(t, s.Failed, "%s: %s", s.What, s.Note)
		require.NotNil(t, s.Pause, s.What)
	}
	require.Contains(t, c.Timeline[0].What, "leading AF_WORK")
	require.Contains(t, c.Timeline[0].Note, "replicas current")
	require.Contains(t, c.Timeline[1].What, "leading AF_RUNQ")
	require.Positive(t, c.LongestPause)
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]bench.Config{
		"unknown scenario":      {Scenario: "speed"},
		"url without token":     {URL: "http://127.0.0.1:1"},
		"spawn without pg":      {Spawn: true},
		"chaos without pg":      {Scenario: bench.Chaos},
		"url with spawn":        {URL: "http://127.0.0.1:1", Token: "x", Spawn: true, DatabaseURL: "postgres://x"},
		"negative failures":     {Model: bench.ModelConfig{Fail500: -1}},
		"too many turns":        {Turns: 1000},
		"spawn with nats url":   {Spawn: true, DatabaseURL: "postgres://x", NATSURL: "nats://127.0.0.1:1"},
		"zero-slot fleet runs":  {Runs: -1},
		"embedded nats cluster": {NATSCluster: 3},
		"two-node nats cluster": {Scenario: bench.Chaos, DatabaseURL: "postgres://x", NATSCluster: 2},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := bench.Run(context.Background(), cfg)
			var ce *bench.ConfigError
			require.ErrorAs(t, err, &ce)
		})
	}
}

func TestSpawnGOMAXPROCSSharesTheCores(t *testing.T) {
	for _, c := range []struct{ cpus, workers, want int }{
		{2, 1, 1},  // NATS, dispatcher and a worker on 2 cores
		{1, 4, 1},  // never below one
		{16, 2, 4}, // 16 cores among 4 processes
		{64, 1, 21},
	} {
		require.Equal(t, c.want, bench.SpawnGOMAXPROCS(c.cpus, c.workers), "%d cores, %d workers", c.cpus, c.workers)
	}
}

func TestServeRoleRejectsUnknownRoles(t *testing.T) {
	var out bytes.Buffer
	err := bench.ServeRole(context.Background(), []string{"scheduler"}, &out, &out)
	require.ErrorContains(t, err, "unknown role")
	require.Error(t, bench.ServeRole(context.Background(), nil, &out, &out))
}

func TestSummaryPercentiles(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in                 []time.Duration
		p50, p90, p99, max int
	}{
		{ms(5), 5, 5, 5, 5},
		{ms(4, 1, 3, 2), 2, 4, 4, 4},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 5, 9, 10, 10},
	} {
		s := bench.Summarize(tc.in)
		require.Equal(t, len(tc.in), s.N)
		require.Equal(t, bench.Duration(time.Duration(tc.p50)*time.Millisecond), s.P50, "p50 of %v", tc.in)
		require.Equal(t, bench.Duration(time.Duration(tc.p90)*time.Millisecond), s.P90, "p90 of %v", tc.in)
		require.Equal(t, bench.Duration(time.Duration(tc.p99)*time.Millisecond), s.P99, "p99 of %v", tc.in)
		require.Equal(t, bench.Duration(time.Duration(tc.max)*time.Millisecond), s.Max, "max of %v", tc.in)
	}
	require.Zero(t, bench.Summarize(nil).N)
}

var agentctl struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildAgentctl builds cmd/agentctl once per test binary (removed when
// the tests end): the chaos fleet's processes are it, re-executed in their
// roles.
func buildAgentctl(t *testing.T) string {
	t.Helper()
	agentctl.once.Do(func() {
		dir, err := os.MkdirTemp("", "agentfleet-bench-bin-*")
		if err != nil {
			agentctl.err = err
			return
		}
		agentctl.dir, agentctl.path = dir, filepath.Join(dir, "agentctl")
		cmd := exec.Command("go", "build", "-o", agentctl.path, "github.com/agentfleet/agentfleet/cmd/agentctl")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentctl.err = fmt.Errorf("go build: %w\n%s", err, strings.TrimSpace(string(out)))
		}
	})
	require.NoError(t, agentctl.err)
	return agentctl.path
}

// TestFleetByURL drives a fleet the bench did not start, as a user does
// with --url: the fleet's workers are configured with the fake model's
// address before the bench starts it (--model-listen), the bench creates
// its tenants with the admin token and sees the fleet only through the
// API and NATS.
func TestFleetByURL(t *testing.T) {
	modelAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	dev, err := fleet.StartDev(ctx, fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AdminToken: "admin-secret", NATSListen: "127.0.0.1:0", DataDir: t.TempDir(),
		Workers: 1, WorkerSlots: 8, DrainTimeout: 5 * time.Second,
		Model: llm.Config{Model: bench.ModelName, BaseURL: "http://" + modelAddr + "/v1"},
	}, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, sc := range []string{bench.Throughput, bench.Latency} {
		t.Run(sc, func(t *testing.T) {
			rep := run(t, bench.Config{
				Scenario: sc, Runs: 10, Warmup: 2, ModelLatency: bench.LatencyDefault,
				URL: dev.URL(), Token: "admin-secret", NATSURL: dev.Embedded.ClientURL(), NATSCreds: dev.Config.NATSCreds, ModelListen: modelAddr,
			})
			require.Equal(t, "url", rep.Parameters.Mode)
			if sc == bench.Throughput {
				require.Nil(t, rep.Figures.Throughput.CPUPerTurn, "not this process's fleet: no CPU figure")
				require.Positive(t, rep.Figures.Throughput.TurnsPerSec)
			} else {
				require.NotNil(t, rep.Figures.Latency.CommitToNATS)
				requireOrdered(t, "submit to done", rep.Figures.Latency.SubmitToDone, 10)
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestWebhooks(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Webhooks, Runs: 40, Warmup: 4, Slots: 8, ModelLatency: bench.LatencyDefault})
	w := rep.Figures.Webhooks
	require.NotNil(t, w)
	require.Equal(t, 40, w.Deliveries)
	require.Equal(t, 40, w.Accepted)
	require.Equal(t, 40, w.IntakeLatency.N)
	require.Equal(t, 40, w.Retries)
	require.Equal(t, 40, w.RetriesDeduped)
	require.False(t, w.WorkersPaused, "an embedded fleet")
	require.Positive(t, w.AcceptedPerSec)
}

// With a fleet of processes no worker runs during the burst (they are
// stopped before it and started after); the dispatcher has a secrets key of its own.
func TestWebhooksSpawned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentctl and runs a fleet of processes")
	}
	dbURL, schema := pgtest.Schema(t)
	rep := run(t, bench.Config{Scenario: bench.Webhooks, Runs: 40, Warmup: 4, Slots: 8, ModelLatency: bench.LatencyDefault,
		Spawn: true, DatabaseURL: dbURL, Schema: schema, Executable: buildAgentctl(t)})
	w := rep.Figures.Webhooks
	require.NotNil(t, w)
	require.True(t, w.WorkersPaused)
	require.Equal(t, 40, w.Accepted)
	require.Equal(t, w.Retries, w.RetriesDeduped)
	require.Contains(t, w.CPUPerDeliveryByProcess, "dispatcher")
}

// TestLatencyOfStreamedChunks: with replies padded into many chunks sent
// further apart than the fleet joins them, the latency scenario times
// each chunk from the fake model to the SSE client and to the NATS
// subscriber; with streaming off there are none.
func TestLatencyOfStreamedChunks(t *testing.T) {
	rep := run(t, bench.Config{Scenario: bench.Latency, Runs: 4, Warmup: -1, ModelLatency: bench.LatencyDefault,
		Model: bench.ModelConfig{CompletionTokens: 40, ChunkSize: 16, ChunkDelay: 3 * time.Millisecond}})
	l := rep.Figures.Latency
	require.NotNil(t, l.ChunkToSSE)
	require.NotNil(t, l.ChunkToNATS)
	// About 200 bytes of padding a turn: a dozen chunks or more.
	require.GreaterOrEqual(t, l.ChunkToSSE.N, 4*2*10)
	requireOrdered(t, "chunk to SSE", *l.ChunkToSSE, 0)
	requireOrdered(t, "chunk to NATS", *l.ChunkToNATS, 0)
	require.GreaterOrEqual(t, l.ChunkToNATS.N, l.ChunkToSSE.N)

	rep = run(t, bench.Config{Scenario: bench.Latency, Runs: 2, Warmup: -1, ModelLatency: bench.LatencyDefault,
		Model: bench.ModelConfig{CompletionTokens: 40}, Stream: "off"})
	require.Nil(t, rep.Figures.Latency.ChunkToSSE)
	require.Equal(t, "off", rep.Parameters.Stream)
}
