package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/internal/bench"
)

const benchUsage = `Measures a fleet against an OpenAI-wire fake model started in this process.
Progress goes to stderr, the figures to stdout (a table, or one JSON object
with --json). Exits 1 when a run failed or was lost, or another check failed.

Scenarios (defaults: runs x turns, model latency, workers x slots):
  throughput  2000 x 2, 0,      1 x 64  turns/s, runs/s, CPU and context switches per turn
  latency      100 x 2, 0,      2 x 8   runs one at a time: per-step latency percentiles
  scale       5000 x 2, 2s,     1 x runs  all in flight at once: completion, RSS per turn
  fairness     300 x 2, 100ms,  2 x 4   tenant B's 4 runs against tenant A's backlog
  chaos        300 x 3, 20ms,   3 x 8   processes; SIGKILL a worker, restart NATS (SIGTERM,
                                      then SIGKILL) and Postgres, SIGKILL the dispatcher
  fanout       200 x 2, 0,      1 x 16  each run spawns 5 children and waits: how soon a
                                      parent resumes after its last child ends
  webhooks    5000 x 1, 0,      1 x 64  signed GitHub deliveries as a burst: accepted/s and
                                      request -> 202 percentiles (with --spawn the workers
                                      are stopped meanwhile), then the runs they started
  batch     100000 x 2, 0,      1 x 64  one batch (JSONL, streamed): admission time, then
                                      turns/s while it runs; peak RSS
  session       30 x 2, 0,      1 x 8   one session's runs one after another: each run's
                                      first prompt and summary calls at the fake model
                                      (the last at most 2x the first), the prompt prefix
                                      kept between calls; and a run of 6 calls carrying
                                      a 200-item list: its prompt characters in all
  tools       1000 calls, 0,    1 x 8   a local MCP server of 30 tools: an agent's first
                                      prompt without it, with 12 tools declared and with
                                      all 30 (a catalog line); a tool call's latency from a
                                      script (read-only and journaled) against a direct call

Fleet (default: embedded NATS + SQLite in a temp dir, in this process):
  --database-url URL   Postgres (a fresh schema) instead of SQLite
  --nats-url URL       an external NATS server instead of the embedded one
  --nats-creds FILE    its creds (default $AGENTFLEET_NATS_CREDS)
  --spawn              run NATS, the dispatcher and the workers as processes
                       (this binary, re-executed); needs --database-url
  --url URL --token T  drive an existing fleet with its admin token; point its
                       workers at the fake model (AGENTFLEET_MODEL=bench-model
                       OPENAI_BASE_URL=<the URL printed>), fixed with --model-listen
`

func (e cliEnv) benchCmd() *cobra.Command {
	c := long(leaf("bench [flags] [SCENARIO]", "Measure a fleet against a fake model: throughput, latency, scale, fairness, chaos, ...",
		`agentctl bench throughput --runs 2000 --workers 1 --slots 64 --turns 2
agentctl bench latency --json
agentctl bench chaos --database-url 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'`,
		e.cmdBench), benchUsage)
	c.ValidArgs = bench.Scenarios
	return c
}

// cmdBench declares bench's flags on fs; what it returns runs the bench.
func (e cliEnv) cmdBench(fs *pflag.FlagSet) runFunc {
	var cfg bench.Config
	fs.IntVar(&cfg.Runs, "runs", 0, "runs (fairness: tenant A's backlog); 0: the scenario's default")
	fs.IntVar(&cfg.Turns, "turns", 0, "turns per run")
	cfg.ModelLatency = bench.LatencyDefault
	fs.Var((*scenarioDuration)(&cfg.ModelLatency), "model-latency", "model reply latency (default: the scenario's)")
	fs.IntVar(&cfg.Workers, "workers", 0, "workers: in-process worker loops, or worker processes with --spawn/chaos")
	fs.IntVar(&cfg.Slots, "slots", 0, "concurrent turns per worker")
	fs.IntVar(&cfg.Submitters, "submitters", 0, "concurrent submitters (default 32)")
	fs.IntVar(&cfg.Warmup, "warmup", 0, "warm-up runs before measuring (default: min(slots, 64); negative: none)")
	fs.IntVar(&cfg.Model.PromptTokens, "prompt-tokens", 0, "prompt tokens each reply reports (0: estimated)")
	fs.IntVar(&cfg.Model.CompletionTokens, "completion-tokens", 0, "completion tokens per reply: reported, and padded into the reply (0: estimated, no padding)")
	fs.IntVar(&cfg.Model.Fail429, "fail-429", 0, "answer the first N model requests with 429 and Retry-After (the warm-up's come first: --warmup -1 puts them in the measured runs)")
	fs.StringVar(&cfg.Model.RetryAfter, "retry-after", "1", "Retry-After of the injected 429s")
	fs.IntVar(&cfg.Model.Fail500, "fail-500", 0, "then answer N model requests with 500")
	fs.BoolVar(&cfg.ModelHTTP1, "model-http1", false, "embedded: the fleet's model client speaks HTTP/1.1 to the fake model, one connection (and in this process two file descriptors) per call in flight, instead of HTTP/2 without TLS")
	fs.StringVar((*string)(&cfg.Stream), "stream", "auto", "the fleet's AGENTFLEET_MODEL_STREAM: auto, on or off")
	fs.DurationVar(&cfg.Model.ChunkDelay, "chunk-delay", 0, "a streamed reply's pause before each chunk")
	fs.IntVar(&cfg.Model.ChunkSize, "chunk-size", 0, "a streamed reply's bytes per chunk (default 16)")
	fs.StringVar(&cfg.ModelListen, "model-listen", "", "fake model address host:port (default: a free port)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "Postgres URL: run the fleet on Postgres in a fresh schema")
	fs.StringVar(&cfg.Schema, "schema", "", "Postgres schema to use instead of a fresh one")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "external NATS server (with --url: the fleet's, for the latency scenario's subscriber)")
	fs.StringVar(&cfg.NATSCreds, "nats-creds", os.Getenv("AGENTFLEET_NATS_CREDS"), "creds file for --nats-url (default $AGENTFLEET_NATS_CREDS)")
	fs.StringVar(&cfg.URL, "url", "", "drive the existing fleet at this API URL")
	fs.StringVar(&cfg.Token, "token", "", "the --url fleet's admin token")
	fs.BoolVar(&cfg.Spawn, "spawn", false, "run the fleet as processes (NATS, dispatcher, workers) on --database-url")
	fs.IntVar(&cfg.NATSCluster, "nats-cluster", 0, "with --spawn or chaos: run NATS as a JetStream cluster of this many nodes (3-5) with R3 streams; chaos then kills the nodes leading AF_WORK and AF_RUNQ")
	fs.StringVar(&cfg.PGRestartCmd, "pg-restart-cmd", "", `chaos: shell command that restarts Postgres, e.g. "pg_ctlcluster --skip-systemctl-redirect 15 main restart"`)
	fs.DurationVar(&cfg.AckWait, "ack-wait", 0, "AckWait of the fleet's turns (default 30s; chaos 5s)")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", 0, "MaxWaiting of the workers' consumer (default: sized from the slots)")
	fs.IntVar(&cfg.GOMAXPROCS, "gomaxprocs", 0, "with --spawn or chaos: GOMAXPROCS of each fleet process (default: the cores divided among the processes, at least 1; -1: Go's default)")
	fs.IntVar(&cfg.ReadyDepth, "ready-depth", 0, "the scheduler's cushion of ready turns (AGENTFLEET_READY_DEPTH; default 4)")
	fs.IntVar(&cfg.BRuns, "b-runs", 0, "fairness: tenant B's runs (default 4)")
	fs.DurationVar(&cfg.FairnessBound, "b-bound", 0, "fairness: bound on each of B's runs' completion time (default 1.5s)")
	fs.DurationVar(&cfg.FairnessSettle, "settle", 0, "fairness: how long A's backlog builds before B submits (default 500ms)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "bound on the whole bench (default 30m)")
	fs.DurationVar(&cfg.Stall, "stall", 0, "give up when no run finished for this long (default 60s; chaos 2m)")
	fs.BoolVar(&cfg.SideEffects, "side-effects", false, "every turn's script POSTs once to a loopback target (counted by Idempotency-Key) and calls ai() once; always on for chaos")
	fs.IntVar(&cfg.Secrets, "secrets", 0, "secrets each bench tenant holds (random values, bound to a host no run calls): every turn loads them and redacts their values")
	fs.BoolVar(&cfg.TraceStub, "trace-stub", false, "turn the fleet's tracing on, exporting OTLP/HTTP to a stub collector in the bench that counts the spans")
	fs.BoolVar(&cfg.KeepDir, "keep", false, "keep the bench's temporary directory (fleet data, process logs)")
	verbose := fs.BoolP("verbose", "v", false, "fleet logs (info and up) to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the fleet, when embedded) to this file")
	traceFile := fs.String("trace", "", "write a runtime execution trace of this process to this file")
	fs.StringVar(&cfg.HeapProfile, "heapprofile", "", "scale: write a heap profile of this process on the plateau to this file")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "with --spawn or chaos: write a CPU profile of each fleet process to this directory")
	asJSON := fs.Bool("json", false, "one JSON object instead of the table")
	jsonFile := fs.String("json-file", "", "also write the JSON report to this file")
	return func(ctx context.Context, pos []string) error {
		return e.runBench(ctx, cfg, pos, benchOutput{verbose: *verbose, cpuProfile: *cpuProfile, traceFile: *traceFile, asJSON: *asJSON, jsonFile: *jsonFile})
	}
}

// benchOutput is where bench writes, besides its table.
type benchOutput struct {
	verbose               bool
	cpuProfile, traceFile string
	asJSON                bool
	jsonFile              string
}

func (e cliEnv) runBench(ctx context.Context, cfg bench.Config, pos []string, o benchOutput) error {
	switch len(pos) {
	case 0:
	case 1:
		cfg.Scenario = pos[0]
	default:
		return usagef("bench takes one scenario (%s), got %q", strings.Join(bench.Scenarios, ", "), strings.Join(pos, " "))
	}
	level := slog.LevelError
	if o.verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	cfg.Progress = e.stderr
	if f, ok := e.stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			cfg.ProgressTTY = true
		}
	}

	stopProfiles, err := startProfiles(o.cpuProfile, o.traceFile)
	if err != nil {
		return err
	}
	rep, err := bench.Run(ctx, cfg)
	if perr := stopProfiles(); perr != nil && err == nil {
		err = perr
	}
	var ce *bench.ConfigError
	if errors.As(err, &ce) {
		return usagef("bench: %v", ce.Err)
	}
	if rep != nil {
		var werr error
		if o.asJSON {
			werr = rep.WriteJSON(e.stdout)
		} else {
			werr = rep.WriteTable(e.stdout)
		}
		if werr != nil {
			return werr
		}
		if o.jsonFile != "" {
			if werr := writeReportFile(o.jsonFile, rep); werr != nil {
				return werr
			}
		}
	}
	if err != nil {
		return err
	}
	if err := rep.Err(); err != nil {
		return exitError{code: exitFailed, err: err}
	}
	return nil
}

// scenarioDuration is a duration flag whose unset (negative) value means
// the scenario's default.
type scenarioDuration time.Duration

func (d *scenarioDuration) String() string {
	if d == nil || *d < 0 {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *scenarioDuration) Type() string { return "duration" }

func (d *scenarioDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return errors.New("must not be negative")
	}
	*d = scenarioDuration(v)
	return nil
}

func writeReportFile(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startProfiles starts a CPU profile and an execution trace of this
// process, as asked; stop writes them out.
func startProfiles(cpuPath, tracePath string) (stop func() error, err error) {
	var files []*os.File
	var stops []func()
	stop = func() error {
		for _, s := range stops {
			s()
		}
		var errs []error
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		return errors.Join(errs...)
	}
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = stop()
			return nil, err
		}
		stops = append(stops, pprof.StopCPUProfile)
	}
	if tracePath != "" {
		f, err := os.Create(tracePath)
		if err != nil {
			_ = stop()
			return nil, err
		}
		files = append(files, f)
		if err := trace.Start(f); err != nil {
			_ = stop()
			return nil, err
		}
		stops = append(stops, trace.Stop)
	}
	return stop, nil
}
