package fleet_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/wire"
)

// agentModel plays the agents of these tests and keeps every request it
// was sent. Each task is a run: "use a disallowed primitive" calls fetch,
// which its agent does not have, then answers what it saw; "fetch URL"
// fetches URL and answers the body or the error; "wait then answer"
// holds its second model call until release is closed.
type agentModel struct {
	mu       sync.Mutex
	requests map[string][]fakeserver.Request
	release  chan struct{}
}

func newAgentModel() *agentModel {
	return &agentModel{requests: map[string][]fakeserver.Request{}, release: make(chan struct{})}
}

func (m *agentModel) seen(task string) []fakeserver.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fakeserver.Request(nil), m.requests[task]...)
}

func (m *agentModel) respond(r fakeserver.Request) (string, agentfleet.Usage, error) {
	task := r.FirstUser()
	m.mu.Lock()
	m.requests[task] = append(m.requests[task], r)
	m.mu.Unlock()
	usage := agentfleet.Usage{PromptTokens: 30, CompletionTokens: 10}
	turn := assistantTurns(r)
	var script string
	switch {
	case task == "use a disallowed primitive" && turn == 0:
		script = `function run() { return {u: parseUrl("https://a.example/p").hostname, f: typeof fetch, h: typeof require}; }`
	case task == "use a disallowed primitive" && turn == 1:
		script = `function run() { fetch("https://a.example/"); }`
	case task == "use a disallowed primitive":
		script = `function run(args) { answer(args); }`
	case strings.HasPrefix(task, "fetch "):
		script = fmt.Sprintf(`function run() { try { answer(fetch(%q).body) } catch (e) { answer("refused: " + e.message) } }`, strings.TrimPrefix(task, "fetch "))
	case task == "wait then answer" && turn == 0:
		script = `function run() { return {step: 1}; }`
	case task == "wait then answer":
		<-m.release
		script = `function run(args) { answer("done"); }`
	default:
		return "", usage, fmt.Errorf("unexpected task %q", task)
	}
	return "Here.\n```javascript\n" + script + "\n```", usage, nil
}

func (f *testFleet) putAgent(name string, spec map[string]any) agentfleet.Agent {
	f.t.Helper()
	body, err := json.Marshal(spec)
	require.NoError(f.t, err)
	a, err := f.tenant.PutAgentJSON(f.ctx, name, body)
	require.NoError(f.t, err)
	return a
}

// An agent defined through the API: its persona sits between the turn
// protocol and the API in the prompt, the prompt declares its primitives
// only, its model is asked for instead of the worker's, and a primitive
// it lacks is not there for its script.
func TestFleetAgentPersonaAndPrimitives(t *testing.T) {
	m := newAgentModel()
	f := setupFleet(t, m.respond, 0)
	f.putAgent("reviewer", map[string]any{"system": "You are the reviewer persona.", "model": "reviewer-model", "primitives": []string{"parseUrl"}})

	run := f.submit(wire.RunCreateRequest{Agent: "reviewer", Message: "use a disallowed primitive"})
	require.Equal(t, 1, run.AgentVersion)
	run = f.wait(run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.JSONEq(t, `{"u": "a.example", "f": "undefined", "h": "undefined"}`, string(run.Answer),
		"turn 3 answers the args of turn 1: turn 2's error kept them")

	reqs := m.seen("use a disallowed primitive")
	require.Len(t, reqs, 3)
	sys := reqs[0].Messages[0].Content
	require.Equal(t, agentfleet.RoleSystem, reqs[0].Messages[0].Role)
	protocol, persona, api := strings.Index(sys, "function run(args)"), strings.Index(sys, "You are the reviewer persona."), strings.Index(sys, "API:")
	require.True(t, protocol >= 0 && protocol < persona && persona < api, "protocol, persona, API: %q", sys)
	require.Contains(t, sys, "declare function parseUrl")
	for _, absent := range []string{"declare function fetch", "require(m: 'http')", "declare function ai(", "declare function spawn"} {
		require.NotContains(t, sys, absent)
	}
	for _, r := range reqs {
		require.Equal(t, "reviewer-model", r.Model, "the agent's model, not the worker's")
	}
	// Turn 2's script called fetch: the model saw it is not defined.
	last := reqs[2].Messages[len(reqs[2].Messages)-1].Content
	require.Contains(t, last, "fetch is not defined")

	// The default agent is unchanged: every primitive, the worker's model.
	def := f.submit(wire.RunCreateRequest{Message: "fetch https://a.example/"})
	f.wait(def.ID, 30*time.Second)
	d := m.seen("fetch https://a.example/")[0]
	require.Equal(t, "fake-model", d.Model)
	require.Contains(t, d.Messages[0].Content, "declare function fetch")
}

// An agent's egress opens private ranges only, never loopback: the API
// refuses a loopback entry or the name localhost (422 naming it), and an
// agent stored with them before it did reaches nothing there, by
// address or by the name localhost, decided when the connection is made.
// The operator's fleet-wide allow (the sandbox's NetworkConfig, as
// AGENTFLEET_EGRESS_ALLOW=127.0.0.1 sets it) is what opens loopback.
func TestFleetAgentEgress(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "internal service")
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	m := newAgentModel()
	f := setupFleet(t, m.respond, 0)
	for _, entry := range []string{"127.0.0.1", "localhost", "169.254.170.23", "fd20:ce::254", "169.254.169.254.nip.io"} {
		body, err := json.Marshal(map[string]any{"egress": []string{"10.0.0.0/8", entry}})
		require.NoError(t, err)
		_, err = f.tenant.PutAgentJSON(f.ctx, "insider", body)
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, entry)
		require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status, entry)
		require.Contains(t, apiErr.Message, fmt.Sprintf("%q", entry))
	}
	_, err := f.store.AgentUpsert(f.ctx, store.AgentUpsertParams{Tenant: "acme", Name: "insider",
		Spec: agentfleet.AgentSpec{Egress: []string{"localhost", "127.0.0.1", "127.0.0.0/8"}}})
	require.NoError(t, err)
	f.putAgent("outsider", map[string]any{"egress": []string{"10.0.0.0/8"}})

	for _, agent := range []string{"insider", "outsider", agentfleet.DefaultAgent} {
		for url, want := range map[string]string{
			srv.URL + "/status":                             "127.0.0.1 is a loopback address",
			fmt.Sprintf("http://localhost:%d/status", port): "blocked by the network guard: localhost",
		} {
			out := f.wait(f.submit(wire.RunCreateRequest{Agent: agent, Message: "fetch " + url}).ID, 30*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, out.Status, out.Error)
			require.Contains(t, string(out.Answer), "refused: ", agent)
			require.Contains(t, string(out.Answer), want, agent)
		}
	}
	require.Zero(t, hits.Load(), "no agent reached the server")
}

// A run keeps the agent version it was admitted under: replacing the
// agent, and then deleting it, while the run is between turns changes
// nothing for it; a run submitted after the replacement gets the new
// version, and after the delete none is admitted. On both stores.
func TestFleetRunKeepsItsAgentVersion(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			m := newAgentModel()
			o := fleetOptions{responder: m.respond}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			runKeepsItsAgentVersion(t, m, setupFleetWith(t, o))
		})
	}
}

func runKeepsItsAgentVersion(t *testing.T, m *agentModel, f *testFleet) {
	f.putAgent("editor", map[string]any{"system": "Persona one.", "max_turns": 5})

	run := f.submit(wire.RunCreateRequest{Agent: "editor", Message: "wait then answer"})
	require.Eventually(t, func() bool { return len(m.seen("wait then answer")) == 2 }, 30*time.Second, 10*time.Millisecond,
		"the run's second turn is at the model")
	v2 := f.putAgent("editor", map[string]any{"system": "Persona two.", "max_turns": 1})
	require.Equal(t, 2, v2.Version)
	later := f.submit(wire.RunCreateRequest{Agent: "editor", Message: "wait then answer"})
	require.Equal(t, 2, later.AgentVersion)
	require.NoError(t, f.tenant.DeleteAgent(f.ctx, "editor"))
	_, err := f.tenant.CreateRun(f.ctx, wire.RunCreateRequest{Agent: "editor", Message: "wait then answer"})
	require.ErrorContains(t, err, `unknown agent "editor"`)
	close(m.release)

	run = f.wait(run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
	require.Equal(t, 1, run.AgentVersion)
	later = f.wait(later.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusMaxTurns, later.Status, "version 2 allows one turn")

	var first, second []string
	for _, r := range m.seen("wait then answer") {
		sys := r.Messages[0].Content
		switch {
		case strings.Contains(sys, "Persona one."):
			first = append(first, sys)
		case strings.Contains(sys, "Persona two."):
			second = append(second, sys)
		}
	}
	require.Len(t, first, 2, "both turns of the first run used version 1, the second after the edit")
	require.Len(t, second, 1, "the later run used version 2")
}
