package fleet_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api/apitest"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/internal/telemetry"
	"github.com/agentfleet/agentfleet/internal/worker"
	"github.com/agentfleet/agentfleet/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded NATS server and the HTTP transport keep a few
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
	)
}

// threeTurns answers "compute N" tasks in three turns: return {n: N},
// double it, answer "result 2N+1". Tasks named "slow ..." loop until
// interrupted.
func threeTurns(r fakeserver.Request) (string, agentfleet.Usage, error) {
	task := r.FirstUser()
	if strings.HasPrefix(task, "slow") {
		return "Spinning.\n```js\nfunction run(args) { while (true) {} }\n```", agentfleet.Usage{}, nil
	}
	n, err := taskNumber(task)
	if err != nil {
		return "", agentfleet.Usage{}, err
	}
	switch assistantTurns(r) {
	case 0:
		return fmt.Sprintf("Start.\n```javascript\nfunction run(args) { log('start'); return {n: %d} }\n```", n), agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}, nil
	case 1:
		return "Double.\n```javascript\nfunction run(args) { return {n: args.n * 2} }\n```", agentfleet.Usage{PromptTokens: 120, CompletionTokens: 20}, nil
	default:
		return "Answer.\n```javascript\nfunction run(args) { answer('result ' + (args.n + 1)) }\n```", agentfleet.Usage{PromptTokens: 140, CompletionTokens: 20}, nil
	}
}

var numberRE = regexp.MustCompile(`compute (\d+)`)

func taskNumber(task string) (int, error) {
	m := numberRE.FindStringSubmatch(task)
	if m == nil {
		return 0, fmt.Errorf("task %q names no number", task)
	}
	return strconv.Atoi(m[1])
}

func assistantTurns(r fakeserver.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == agentfleet.RoleAssistant {
			n++
		}
	}
	return n
}

// testFleet is a dispatcher and two worker processes on an embedded NATS
// server, SQLite, and an OpenAI-wire fake model.
type testFleet struct {
	t          *testing.T
	ctx        context.Context
	store      store.Store
	emb        *bus.Embedded
	bus        *bus.Bus
	model      *fakeserver.Server
	dispatcher *fleet.Dispatcher
	workers    []*fleet.WorkerProcess
	stopWorker []context.CancelFunc
	workerDone []chan struct{}
	// registries are the workers' metrics, one per worker.
	registries []*prometheus.Registry
	// startWorker starts one more worker process and returns its index.
	startWorker func() int
	admin       *client.Client
	tenantKey   string
	tenant      *client.Client
}

// fleetOptions shape a test fleet; zero values give two workers with
// eight slots each and an unlimited tenant "acme".
type fleetOptions struct {
	responder fakeserver.Responder
	latency   time.Duration
	workers   int
	slots     int
	tenant    wire.TenantRequest
	// modelAttempts caps the model client's attempts per call (0: its
	// default retries).
	modelAttempts int
	// stranded, when set, is both the interval of the dispatcher's sweep
	// of runs stranded at admission and the age it looks for.
	stranded time.Duration
	// store, when set, is the fleet's store instead of a new SQLite file.
	store store.Store
	// tracer, when set, traces the dispatcher's admissions and every
	// worker's turns.
	tracer *telemetry.Tracer
	// secrets is the dispatcher's and the workers' key (testSecrets
	// when nil).
	secrets *secrets.Box
	// sandbox configures the workers' sandboxes (zero: the defaults).
	sandbox sandbox.Config
	// model, when set, wraps each worker's model client.
	model func(llm.Client) llm.Client
}

func setupFleet(t *testing.T, responder fakeserver.Responder, latency time.Duration) *testFleet {
	t.Helper()
	return setupFleetWith(t, fleetOptions{responder: responder, latency: latency})
}

func setupFleetWith(t *testing.T, o fleetOptions) *testFleet {
	t.Helper()
	if o.workers == 0 {
		o.workers = 2
	}
	if o.slots == 0 {
		o.slots = 8
	}
	if o.tenant.ID == "" {
		o.tenant.ID = "acme"
	}
	if o.secrets == nil {
		o.secrets = testSecrets
	}
	ctx, cancel := context.WithCancel(context.Background())
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	emb := bustest.StartServer(t)
	// A short AckWait makes a crashed worker's turns come back quickly.
	b := bustest.Connect(t, emb, func(c *bus.Config) { c.AckWait = 2 * time.Second })
	st := o.store
	if st == nil {
		var err error
		st, err = sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "fleet.db")})
		require.NoError(t, err)
	}
	model, err := fakeserver.Start(fakeserver.Config{Responder: o.responder, Latency: o.latency})
	require.NoError(t, err)

	f := &testFleet{t: t, ctx: ctx, store: st, emb: emb, bus: b, model: model}
	f.dispatcher, err = fleet.NewDispatcher(fleet.DispatcherConfig{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AdminToken: "admin-secret", Store: st, Bus: b, Logger: logger,
		KeeperInterval: 100 * time.Millisecond, StrandedInterval: o.stranded, StrandedAfter: o.stranded,
		Secrets: o.secrets, Egress: testEgress, CallbackInterval: 20 * time.Millisecond, CallbackBackoff: 10 * time.Millisecond,
		Tracer: o.tracer,
	})
	require.NoError(t, err)
	dispatcherDone := make(chan struct{})
	go func() { defer close(dispatcherDone); _ = f.dispatcher.Run(ctx) }()

	f.startWorker = func() int {
		i := len(f.workers)
		var mc llm.Client
		mc, err := llm.New(llm.Config{Model: "fake-model", BaseURL: model.URL(), MaxAttempts: o.modelAttempts})
		require.NoError(t, err)
		if o.model != nil {
			mc = o.model(mc)
		}
		reg := fleet.NewRegistry()
		wp, err := fleet.NewWorkerProcess(fleet.WorkerConfig{
			Workers: 1, Slots: o.slots, ModelClient: mc, Model: llm.Config{Model: "fake-model"}, Sandbox: o.sandbox,
			Store: st, Bus: b, Registry: reg, Logger: logger.With("proc", i), RetryDelay: 50 * time.Millisecond,
			Tracer: o.tracer, Secrets: o.secrets,
		})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = wp.Run(wctx) }()
		f.workers = append(f.workers, wp)
		f.registries = append(f.registries, reg)
		f.stopWorker = append(f.stopWorker, stop)
		f.workerDone = append(f.workerDone, done)
		return i
	}
	for range o.workers {
		f.startWorker()
	}
	t.Cleanup(func() {
		cancel()
		for _, d := range f.workerDone {
			<-d
		}
		<-dispatcherDone
		for _, wp := range f.workers {
			_ = wp.Close()
		}
		_ = b.Close()
		_ = model.Close()
		_ = st.Close()
	})

	f.admin = apiClient(t, f.dispatcher.URL(), "admin-secret")
	tv, err := f.admin.CreateTenant(ctx, o.tenant)
	require.NoError(t, err)
	require.NotEmpty(t, tv.APIKey)
	f.tenant = apiClient(t, f.dispatcher.URL(), tv.APIKey)
	f.tenantKey = tv.APIKey
	return f
}

// apiClient is a client of the dispatcher at baseURL whose every answer
// is held against the API's OpenAPI document (internal/api/apitest).
func apiClient(t testing.TB, baseURL, token string) *client.Client {
	c := client.New(baseURL, token)
	c.HTTP.Transport = apitest.Transport(t, http.DefaultTransport)
	return c
}

// crashWorker stops worker i as a crash would: its in-flight turns are
// abandoned without an ack.
func (f *testFleet) crashWorker(i int) {
	f.stopWorker[i]()
	<-f.workerDone[i]
}

func (f *testFleet) submit(req wire.RunCreateRequest) agentfleet.Run {
	f.t.Helper()
	run, err := f.tenant.CreateRun(f.ctx, req)
	require.NoError(f.t, err)
	return run
}

func (f *testFleet) wait(id string, timeout time.Duration) agentfleet.Run {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, timeout)
	defer cancel()
	run, err := f.tenant.Wait(ctx, id)
	require.NoError(f.t, err, "run %s did not end in %s", id, timeout)
	return run
}

func (f *testFleet) events(id string) []agentfleet.Event {
	f.t.Helper()
	evs, err := f.store.EventListByRun(f.ctx, store.EventListByRunParams{RunID: id})
	require.NoError(f.t, err)
	return evs
}

// requireOneCommitPerTurn checks a completed run's trace: dense seq, one
// model reply and one observation per turn, turns 1..n.
func (f *testFleet) requireOneCommitPerTurn(run agentfleet.Run) {
	f.t.Helper()
	f.requireOneCommitPerTurnWith(run, nil)
}

// requireOneCommitPerTurnWith is requireOneCommitPerTurn for a run whose
// scripts make ai() sub-calls: subCalls[turn] of them in that turn.
func (f *testFleet) requireOneCommitPerTurnWith(run agentfleet.Run, subCalls map[int]int) {
	f.t.Helper()
	evs := f.events(run.ID)
	calls := map[int]int{}
	for i, ev := range evs {
		require.EqualValues(f.t, i+1, ev.Seq, "run %s: seq must be dense", run.ID)
		if ev.Type == agentfleet.EventModelCall {
			calls[ev.Turn]++
		}
	}
	steps, err := f.store.StepListByRun(f.ctx, store.StepListByRunParams{RunID: run.ID})
	require.NoError(f.t, err)
	perTurn := map[[2]int]int{}
	turnSteps := 0
	for _, s := range steps {
		perTurn[[2]int{s.Turn, s.Index}]++
		if s.Turn > 0 { // turn 0 holds the task as submitted
			turnSteps++
		}
	}
	for turn := 1; turn <= run.Turn; turn++ {
		require.Equal(f.t, 1+subCalls[turn], calls[turn], "run %s turn %d: model_call events", run.ID, turn)
		require.Equal(f.t, 1, perTurn[[2]int{turn, 0}], "run %s turn %d: model steps", run.ID, turn)
		require.Equal(f.t, 1, perTurn[[2]int{turn, 1}], "run %s turn %d: observation steps", run.ID, turn)
	}
	require.Equal(f.t, 2*run.Turn, turnSteps)
}

// requireCompletes submits a run of message and checks that it completes
// with answer (JSON), one commit per turn, and its events on the stream
// as in the store.
func (f *testFleet) requireCompletes(message, answer string) agentfleet.Run {
	f.t.Helper()
	run := f.wait(f.submit(wire.RunCreateRequest{Message: message}).ID, 30*time.Second)
	require.Equal(f.t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.JSONEq(f.t, answer, string(run.Answer))
	f.requireOneCommitPerTurn(run)
	f.requireStreamMatchesStore(run)
	return run
}

// requireStreamMatchesStore checks that a NATS subscriber replaying a
// run's events from the stream reads what the store holds: every event,
// in seq order (a subscriber skips a seq it has seen, so an event stored
// out of order would be missing here).
func (f *testFleet) requireStreamMatchesStore(run agentfleet.Run) {
	f.t.Helper()
	want := f.events(run.ID)
	require.NotEmpty(f.t, want)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	es, err := f.bus.RunEvents(ctx, run.Tenant, run.ID, 0)
	require.NoError(f.t, err)
	defer es.Close()
	for _, w := range want {
		ev, err := es.Next(ctx)
		require.NoError(f.t, err, "run %s: event %d from the stream", run.ID, w.Seq)
		require.Equal(f.t, w.Seq, ev.Seq, "run %s", run.ID)
		require.Equal(f.t, w.Type, ev.Type, "run %s seq %d", run.ID, w.Seq)
	}
}

// modelCalls counts the model calls made for turn of the runs whose task
// is message ("": of every run).
func (f *testFleet) modelCalls(message string, turn int) int {
	n := 0
	for _, r := range f.model.Received() {
		if (message == "" || r.FirstUser() == message) && assistantTurns(r) == turn-1 {
			n++
		}
	}
	return n
}

// jetStream is a JetStream client of its own on the fleet's NATS server,
// for tests that reach past the bus (purge a stream, cap one).
func (f *testFleet) jetStream() jetstream.JetStream {
	f.t.Helper()
	nc, err := nats.Connect(f.emb.ClientURL())
	require.NoError(f.t, err)
	f.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(f.t, err)
	return js
}

// continued is the count of next turns worker i sent by path (in_place,
// direct, scheduler).
func (f *testFleet) continued(i int, path string) int {
	return f.metric(i, "agentfleet_worker_turns_continued_total", "path", path)
}

// metric is the value of worker i's counter or gauge name with label=value
// (0 when there is none).
func (f *testFleet) metric(i int, name, label, value string) int {
	f.t.Helper()
	return metricValue(f.t, f.registries[i], name, label, value)
}

// metricValue is the value in reg of the counter or gauge name with
// label=value (0 when there is none).
func metricValue(t *testing.T, reg prometheus.Gatherer, name, label, value string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return int(m.GetCounter().GetValue() + m.GetGauge().GetValue())
				}
			}
		}
	}
	return 0
}

// On a fleet where its tenant is alone, a run's turn that the scheduler
// forwarded is followed by the next turn in the same worker slot; the
// turn after that goes through the scheduler again. When the turn run in
// place fails, the message of the turn before it comes back, and the
// failed turn runs from a message of its own: the run completes with one
// commit per turn.
func TestFleetRunsTheNextTurnInPlace(t *testing.T) {
	var failed atomic.Bool
	f := setupFleetWith(t, fleetOptions{workers: 1, modelAttempts: 1,
		responder: func(r fakeserver.Request) (string, agentfleet.Usage, error) {
			if strings.Contains(r.FirstUser(), "compute 7") && assistantTurns(r) == 1 && failed.CompareAndSwap(false, true) {
				return "", agentfleet.Usage{}, &fakeserver.StatusError{Status: http.StatusBadGateway, Message: "flaky upstream"}
			}
			return threeTurns(r)
		}})

	f.requireCompletes("compute 3", `"result 7"`)
	require.Equal(t, 1, f.continued(0, "in_place"), "turn 2 ran in place")
	require.Equal(t, 1, f.continued(0, "scheduler"), "turn 3 went through the scheduler")
	require.Equal(t, 0, f.continued(0, "direct"))
	require.GreaterOrEqual(t, f.metric(0, "agentfleet_sandbox_processes", "state", "idle"), 1, "the turns' sandbox process waits for the next")
	require.Equal(t, 0, f.metric(0, "agentfleet_sandbox_processes", "state", "busy"))

	run := f.requireCompletes("compute 7", `"result 15"`)
	require.True(t, failed.Load())
	require.EqualValues(t, 360+60, run.Usage.Total(), "usage counts each committed turn once")
	require.Equal(t, 2, f.continued(0, "in_place"), "turn 2 was tried in place")
	require.Equal(t, 1, f.continued(0, "direct"), "turn 1's redelivery published turn 2")
	require.Equal(t, 2, f.continued(0, "scheduler"))
	require.Equal(t, 2, f.modelCalls("compute 7", 2), "turn 2: the failed call in place and the one from its own message")
}

// A run recorded by a submission that died before it reached NATS (no
// queued event and no turn published) is found by the dispatcher's sweep
// and runs to completion, with its events on the stream as in the store.
func TestFleetRunsARunItsSubmissionNeverQueued(t *testing.T) {
	f := setupFleetWith(t, fleetOptions{responder: threeTurns, stranded: 200 * time.Millisecond})
	res, err := f.store.RunCreate(f.ctx, store.RunCreateParams{
		Tenant: "acme", Agent: agentfleet.DefaultAgent, Message: "compute 3",
		Events: []agentfleet.Event{{
			V: agentfleet.EventVersion, Tenant: "acme", Type: agentfleet.EventQueued,
			TS: time.Now().UTC(), Content: "compute 3",
		}},
	})
	require.NoError(t, err)
	run := f.wait(res.Run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.JSONEq(t, `"result 7"`, string(run.Answer))
	f.requireOneCommitPerTurn(run)
	f.requireStreamMatchesStore(run)
}

// A running run whose turn message vanishes from NATS (here: the turn
// queues are purged during turn 2's model call, and that call fails, so
// the worker's retry has no message left to bring back) is found by the
// dispatcher's sweep, gets turn 2 again and completes with one commit per
// turn.
func TestFleetRunsARunWhoseTurnMessageVanished(t *testing.T) {
	var (
		f      *testFleet
		js     jetstream.JetStream
		purged atomic.Bool
	)
	responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		if assistantTurns(r) == 1 && purged.CompareAndSwap(false, true) {
			for _, name := range []string{"AF_RUNQ", "AF_WORK"} {
				st, err := js.Stream(f.ctx, name)
				if err != nil {
					return "", agentfleet.Usage{}, err
				}
				if err := st.Purge(f.ctx); err != nil {
					return "", agentfleet.Usage{}, err
				}
			}
			return "", agentfleet.Usage{}, &fakeserver.StatusError{Status: http.StatusBadGateway, Message: "flaky upstream"}
		}
		return threeTurns(r)
	}
	f = setupFleetWith(t, fleetOptions{workers: 1, modelAttempts: 1, responder: responder, stranded: 200 * time.Millisecond})
	js = f.jetStream()

	f.requireCompletes("compute 3", `"result 7"`)
	require.True(t, purged.Load())
	require.Equal(t, 2, f.modelCalls("", 2), "turn 2: the call that failed and the one after the sweep")
}

// When the events of a turn are refused while the next turn runs in
// place, that turn neither commits nor publishes: the message comes back,
// the refused events are sent again ahead of the next turn's, and the next
// turn runs from its own message with the reply it had recorded.
func TestFleetTurnInPlaceWaitsForThePreviousTurnsEvents(t *testing.T) {
	var (
		f      *testFleet
		js     jetstream.JetStream
		filled atomic.Bool
	)
	// limitEvents caps the events stream at max messages (-1: no cap);
	// a full stream refuses what is published to it.
	limitEvents := func(max int64) error {
		st, err := js.Stream(f.ctx, "AF_EVENTS")
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		cfg.MaxMsgs, cfg.Discard = max, jetstream.DiscardNew
		_, err = js.UpdateStream(f.ctx, cfg)
		return err
	}
	responder := func(r fakeserver.Request) (string, agentfleet.Usage, error) {
		switch assistantTurns(r) {
		case 0:
			// Turn 1's call: the stream holds the run's events so far
			// (its admission); fill it, so turn 1's are refused.
			st, err := js.Stream(f.ctx, "AF_EVENTS")
			if err != nil {
				return "", agentfleet.Usage{}, err
			}
			info, err := st.Info(f.ctx)
			if err != nil {
				return "", agentfleet.Usage{}, err
			}
			if err := limitEvents(int64(info.State.Msgs)); err != nil {
				return "", agentfleet.Usage{}, err
			}
			filled.Store(true)
		case 1:
			if filled.Swap(false) {
				// Turn 2's call, in place: turn 1's events went out on
				// the fleet's connection before it, so once a probe
				// sent on that connection is refused, they were too.
				// Lift the cap: only a worker that waits for turn 1's
				// outcome keeps turn 2's events from landing first.
				probe := []agentfleet.Event{{RunID: "probe", Tenant: "acme", Seq: 1, Type: agentfleet.EventLog, TS: time.Now()}}
				if err := f.bus.PublishEvents(f.ctx, probe); err == nil {
					return "", agentfleet.Usage{}, fmt.Errorf("the probe was stored: the stream is not full")
				}
				if err := limitEvents(-1); err != nil {
					return "", agentfleet.Usage{}, err
				}
			}
		}
		return threeTurns(r)
	}
	f = setupFleetWith(t, fleetOptions{workers: 1, modelAttempts: 1, responder: responder})
	js = f.jetStream()

	f.requireCompletes("compute 7", `"result 15"`)
	require.Equal(t, 1, f.continued(0, "in_place"), "turn 2 was tried in place")
	require.GreaterOrEqual(t, f.metric(0, "agentfleet_worker_turn_messages_total", "result", "retry"), 1, "turn 1's message came back")
	require.Equal(t, 1, f.modelCalls("", 2), "turn 2 ran on the reply its attempt in place recorded")
}

// A worker that ran a turn in place under the message of the turn before
// it, committed it, and failed before publishing the turn after it, left
// that message un-acked: its redelivery publishes the owed turn.
func TestFleetRedeliveryAfterATurnInPlacePublishesTheNextTurn(t *testing.T) {
	f := setupFleetWith(t, fleetOptions{workers: 1, responder: threeTurns})
	// Turns 1 and 2 of "compute 7" as the failed worker committed them.
	created, err := f.store.RunCreate(f.ctx, store.RunCreateParams{Tenant: "acme", Message: "compute 7"})
	require.NoError(t, err)
	id := created.Run.ID
	for turn, n := range []int{7, 14} {
		turn++
		_, err := f.store.TurnLoad(f.ctx, store.TurnLoadParams{RunID: id, Turn: turn, HistoryFrom: 1})
		require.NoError(t, err)
		msgs := []agentfleet.ChatMessage{{Role: agentfleet.RoleUser, Content: "compute 7"}}
		for range turn - 1 {
			msgs = append(msgs, agentfleet.ChatMessage{Role: agentfleet.RoleAssistant})
		}
		reply, _, err := threeTurns(fakeserver.Request{Messages: msgs})
		require.NoError(t, err)
		_, err = f.store.TurnCommit(f.ctx, store.TurnCommitParams{
			RunID: id, Turn: turn, Status: agentfleet.StatusRunning, Args: []byte(fmt.Sprintf(`{"n":%d}`, n)),
			Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: reply}, {Kind: agentfleet.StepObservation, Content: "ok"}},
		})
		require.NoError(t, err)
	}
	// Turn 1's message comes back (the scheduler had marked it Direct).
	require.NoError(t, f.bus.ForwardTurn(f.ctx, bus.Turn{RunID: id, Tenant: "acme", Turn: 1, Direct: true}))

	run := f.wait(id, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.Equal(t, 3, run.Turn)
	require.JSONEq(t, `"result 15"`, string(run.Answer))
	require.Len(t, f.model.Received(), 1, "only turn 3 called the model")
}

func TestFleetRunsHundredRunsAndSurvivesAWorkerCrash(t *testing.T) {
	f := setupFleet(t, threeTurns, 15*time.Millisecond)
	const runs = 100
	ids := make([]string, runs)
	for i := range runs {
		ids[i] = f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i)}).ID
	}

	// Crash worker 0 while it has turns in flight: once a few dozen runs
	// are through, both workers are busy.
	require.Eventually(t, func() bool {
		list, err := f.store.RunList(f.ctx, store.RunListParams{Tenant: "acme", Status: []agentfleet.RunStatus{agentfleet.StatusCompleted}, Limit: 500})
		require.NoError(t, err)
		return len(list.Runs) >= 30
	}, 60*time.Second, 5*time.Millisecond)
	f.crashWorker(0)

	for i, id := range ids {
		run := f.wait(id, 60*time.Second)
		require.Equal(t, agentfleet.StatusCompleted, run.Status, "run %d: %s", i, run.Error)
		require.JSONEq(t, strconv.Quote(fmt.Sprintf("result %d", 2*i+1)), string(run.Answer), "run %d", i)
		require.Equal(t, 3, run.Turn)
		require.EqualValues(t, 360+60, run.Usage.Total(), "run %d usage counts each turn once", i)
		f.requireOneCommitPerTurn(run)
	}

	// The model was paid at most once more per interrupted turn: a turn
	// the crashed worker held (at most its 8 slots) may have had its
	// call made twice, no other turn.
	calls := map[string]int{}
	for _, r := range f.model.Received() {
		calls[fmt.Sprintf("%s/%d", r.FirstUser(), assistantTurns(r))]++
	}
	repeated := 0
	for key, n := range calls {
		require.LessOrEqual(t, n, 2, "turn %s called the model %d times", key, n)
		if n == 2 {
			repeated++
		}
	}
	require.Len(t, calls, 3*runs)
	require.LessOrEqual(t, repeated, 8, "only the crashed worker's in-flight turns may repeat a call")
	t.Logf("model calls: %d for %d turns (%d repeated after the crash)", len(f.model.Received()), 3*runs, repeated)
}

func TestFleetCancel(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)

	// A running script is interrupted. Its turn commits nothing before
	// its CPU deadline, so the sign that it runs is its model call.
	spinning := f.submit(wire.RunCreateRequest{Message: "slow spin"})
	require.Eventually(t, func() bool { return f.modelCalls("slow spin", 1) > 0 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the reply reaches the worker and its script starts: nothing to wait on
	start := time.Now()
	_, err := f.tenant.CancelRun(f.ctx, spinning.ID)
	require.NoError(t, err)
	run := f.wait(spinning.ID, 10*time.Second)
	require.Equal(t, agentfleet.StatusCancelled, run.Status)
	require.Less(t, time.Since(start), 3*time.Second, "cancel must interrupt the script, not wait for its CPU deadline")
	evs := f.events(spinning.ID)
	require.Equal(t, agentfleet.EventDone, evs[len(evs)-1].Type)
	require.Equal(t, agentfleet.EventCancelled, evs[len(evs)-2].Type)

	// Cancelling again is harmless; cancelling a finished run is 409.
	_, err = f.tenant.CancelRun(f.ctx, spinning.ID)
	require.NoError(t, err)
	done := f.wait(f.submit(wire.RunCreateRequest{Message: "compute 1"}).ID, 10*time.Second)
	_, err = f.tenant.CancelRun(f.ctx, done.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
}

func TestFleetSessionOrdering(t *testing.T) {
	f := setupFleet(t, threeTurns, 5*time.Millisecond)
	var ids []string
	for i := range 5 {
		ids = append(ids, f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i), SessionID: "s1"}).ID)
	}
	// A run outside the session is not held up by it.
	other := f.submit(wire.RunCreateRequest{Message: "compute 99"})
	var prevDone time.Time
	for i, id := range ids {
		run := f.wait(id, 30*time.Second)
		require.Equal(t, agentfleet.StatusCompleted, run.Status)
		evs := f.events(id)
		var started, done time.Time
		for _, ev := range evs {
			switch ev.Type {
			case agentfleet.EventStarted:
				started = ev.TS
			case agentfleet.EventDone:
				done = ev.TS
			}
		}
		require.False(t, started.Before(prevDone), "session run %d started before run %d ended", i, i-1)
		prevDone = done
	}
	require.Equal(t, agentfleet.StatusCompleted, f.wait(other.ID, 10*time.Second).Status)
}

func TestFleetSSEResume(t *testing.T) {
	f := setupFleet(t, threeTurns, 20*time.Millisecond)
	run := f.submit(wire.RunCreateRequest{Message: "compute 7"})

	// Read a few events live, drop the connection, resume after them.
	var first []agentfleet.Event
	err := f.tenant.Events(f.ctx, run.ID, 0, func(ev agentfleet.Event) error {
		if ev.Type == agentfleet.EventResponseChunk {
			return nil // streamed pieces of a reply, not stored
		}
		first = append(first, ev)
		if len(first) == 3 {
			return client.ErrStopEvents
		}
		return nil
	})
	require.NoError(t, err)
	var rest []agentfleet.Event
	require.NoError(t, f.tenant.Events(f.ctx, run.ID, 3, func(ev agentfleet.Event) error {
		if ev.Type == agentfleet.EventResponseChunk {
			return nil
		}
		rest = append(rest, ev)
		return nil
	}))
	all := append(first, rest...)
	for i, ev := range all {
		require.EqualValues(t, i+1, ev.Seq, "resumed stream must be dense and without repeats")
	}
	require.Equal(t, agentfleet.EventDone, all[len(all)-1].Type)
	require.Equal(t, f.events(run.ID), all, "the stream carries exactly the stored events")

	// The raw wire: id = seq, event = type, Last-Event-ID honoured, the
	// stream ends after the terminal event.
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.dispatcher.URL()+"/v1/runs/"+run.ID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.tenant.Token)
	req.Header.Set("Last-Event-ID", strconv.Itoa(len(all)-2))
	resp, err := f.tenant.HTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "id:") || strings.HasPrefix(l, "event:") {
			lines = append(lines, l)
		}
	}
	require.Equal(t, []string{
		fmt.Sprintf("id: %d", len(all)-1), "event: " + string(all[len(all)-2].Type),
		fmt.Sprintf("id: %d", len(all)), "event: done",
	}, lines)
}

func TestFleetTenantsAreIsolated(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)
	tv, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "globex"})
	require.NoError(t, err)
	other := apiClient(t, f.dispatcher.URL(), tv.APIKey)
	run := f.submit(wire.RunCreateRequest{Message: "compute 3"})
	f.wait(run.ID, 10*time.Second)

	_, err = other.GetRun(f.ctx, run.ID)
	require.True(t, client.IsNotFound(err), "another tenant's run is 404, got %v", err)
	err = other.Events(f.ctx, run.ID, 0, func(agentfleet.Event) error { return nil })
	require.True(t, client.IsNotFound(err), "another tenant's events are 404, got %v", err)
	_, err = other.GetTenant(f.ctx, "acme")
	require.True(t, client.IsNotFound(err), "another tenant's usage is 404, got %v", err)
	list, err := other.ListRuns(f.ctx, client.ListRunsParams{})
	require.NoError(t, err)
	require.Empty(t, list.Runs)
}

func TestFleetDeadLettersATurnThatKeepsFailing(t *testing.T) {
	f := setupFleetWith(t, fleetOptions{modelAttempts: 1,
		responder: func(fakeserver.Request) (string, agentfleet.Usage, error) {
			return "", agentfleet.Usage{}, &fakeserver.StatusError{Status: http.StatusBadGateway, Message: "upstream is down"}
		}})
	run := f.wait(f.submit(wire.RunCreateRequest{Message: "compute 1"}).ID, 60*time.Second)
	require.Equal(t, agentfleet.StatusFailed, run.Status)
	require.Contains(t, run.Error, "attempted 5 times")
	evs := f.events(run.ID)
	require.Equal(t, agentfleet.EventDone, evs[len(evs)-1].Type)
	require.Equal(t, agentfleet.EventError, evs[len(evs)-2].Type)
	require.Len(t, f.model.Received(), 5, "each delivery tried the model once, then the fleet gave up")

	// The run fails first (a store write the worker retries until it
	// lands), then the message moves to the dead-letter stream: a
	// watcher of the run can see it failed a moment before the entry.
	var dead []bus.DeadLetterRecord
	require.Eventually(t, func() bool {
		var err error
		dead, err = f.bus.DeadLetters(f.ctx, 0, 10)
		require.NoError(t, err)
		return len(dead) > 0
	}, 10*time.Second, 10*time.Millisecond, "the dead-letter entry")
	require.Len(t, dead, 1)
	require.Equal(t, run.ID, dead[0].RunID)
	require.Contains(t, dead[0].Reason, "attempted 5 times")
}

// Workers tell the scheduler their slots (it feeds the work queue a turn
// per idle slot): the tally hears both workers' 8 slots, and a stopped
// worker's are gone at once rather than after the announcements' TTL.
func TestFleetWorkersAnnounceTheirSlots(t *testing.T) {
	f := setupFleetWith(t, fleetOptions{responder: threeTurns})
	tally, err := f.bus.TallySlots(f.ctx, worker.DurableDefault)
	require.NoError(t, err)
	defer tally.Close()
	require.Eventually(t, func() bool { return tally.Total() == 16 }, 5*time.Second, 10*time.Millisecond, "two workers of 8 slots")
	f.crashWorker(1)
	require.Eventually(t, func() bool { return tally.Total() == 8 }, time.Second, 10*time.Millisecond, "the stopped worker's slots")
	run := f.wait(f.submit(wire.RunCreateRequest{Message: "compute 3"}).ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
}
