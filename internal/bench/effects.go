package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// effectTarget is the side-effect target of the bench's scripts
// (Config.SideEffects): a loopback HTTP server that counts the POSTs it
// receives by Idempotency-Key, and the keys each effect (a run's turn, as
// its body says) came with. A key received twice is a POST the fleet sent
// again, which a receiver honouring the key drops; an effect that came
// with two keys, or none, is one such a receiver would apply twice.
type effectTarget struct {
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	byKey    map[string]int
	byEffect map[string]map[string]bool // "tag/run/turn" -> keys
	noKey    int
}

func startEffectTarget() (*effectTarget, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("side-effect target: %w", err)
	}
	t := &effectTarget{ln: ln, byKey: map[string]int{}, byEffect: map[string]map[string]bool{}}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

func (t *effectTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var effect struct {
		Tag       string
		Run, Turn int
	}
	if err := json.NewDecoder(r.Body).Decode(&effect); err != nil {
		http.Error(w, "want {tag, run, turn}", http.StatusBadRequest)
		return
	}
	id := fmt.Sprintf("%s/%d/%d", effect.Tag, effect.Run, effect.Turn)
	key := r.Header.Get("Idempotency-Key")
	t.mu.Lock()
	if key == "" {
		t.noKey++
	} else {
		t.byKey[key]++
	}
	if t.byEffect[id] == nil {
		t.byEffect[id] = map[string]bool{}
	}
	t.byEffect[id][key] = true
	n := t.byKey[key]
	t.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"received":%d}`, n)
}

// URL is the target's base URL, which the bench's scripts POST to.
func (t *effectTarget) URL() string { return "http://" + t.ln.Addr().String() }

func (t *effectTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = t.srv.Shutdown(ctx)
}

// EffectFigures are what the side-effect target and the usage ledger saw
// of the measured runs, each of whose turns POSTed once and called ai()
// once.
type EffectFigures struct {
	// Expected is the POSTs the committed turns made (one each).
	Expected int `json:"expected"`
	// Repeated counts the effects that arrived under more than one
	// Idempotency-Key, or without one: those a receiver honouring the
	// key would apply twice. Resent counts POSTs received again with a
	// key already seen: sent again after a crash, before their outcome
	// was recorded, and dropped by such a receiver. Missing counts the
	// committed turns whose POST never arrived; NoKey the POSTs without
	// a key.
	Repeated int `json:"repeated"`
	Resent   int `json:"resent"`
	Missing  int `json:"missing"`
	NoKey    int `json:"no_key"`
	// AICalls are the ai() requests the model received, AIRepeated those
	// beyond one per (run, turn); AIReplayed the ai() calls a turn
	// executed again took from the journal instead.
	AICalls    int `json:"ai_calls"`
	AIRepeated int `json:"ai_repeated"`
	AIReplayed int `json:"ai_replayed"`
	// Billed is the model calls the usage ledger charged the runs for;
	// BilledTwice those beyond one per turn's reply and one per ai().
	Billed      int `json:"billed"`
	BilledTwice int `json:"billed_twice"`
}

// effectFigures checks the side effects of runs: every committed turn's
// POST arrived once, with its key, and every model call was billed once.
func (e *env) effectFigures(ctx context.Context, st store.Store, t *tenant, runs []agentfleet.Run) (*EffectFigures, error) {
	f := &EffectFigures{}
	e.effects.mu.Lock()
	byKey := make(map[string]int, len(e.effects.byKey))
	for k, n := range e.effects.byKey {
		byKey[k] = n
	}
	f.NoKey = e.effects.noKey
	keysOf := make(map[string]int, len(e.effects.byEffect))
	for id, keys := range e.effects.byEffect {
		keysOf[id] = len(keys)
	}
	e.effects.mu.Unlock()
	billed, err := st.UsageList(ctx, store.UsageListParams{Tenant: t.id, GroupBy: "run"})
	if err != nil {
		return nil, fmt.Errorf("usage of %s: %w", t.id, err)
	}
	calls := make(map[string]int64, len(billed))
	for _, row := range billed {
		calls[row.Key] = row.Calls
	}
	for _, r := range runs {
		i, _ := runIndex(t, r)
		for turn := 1; turn <= r.Turn; turn++ {
			f.Expected++
			n, keys := byKey[fmt.Sprintf("%s/%d/0", r.ID, turn)], keysOf[fmt.Sprintf("%s/%d/%d", t.tag, i, turn)]
			if n == 0 || keys == 0 {
				f.Missing++
			}
			f.Resent += max(0, n-1)
			f.Repeated += max(0, keys-1)
		}
		f.Billed += int(calls[r.ID])
		f.BilledTwice += max(0, int(calls[r.ID])-2*r.Turn)
		evs, err := st.EventListByRun(ctx, store.EventListByRunParams{RunID: r.ID})
		if err != nil {
			return nil, fmt.Errorf("events of %s: %w", r.ID, err)
		}
		for _, ev := range evs {
			if ev.Type == agentfleet.EventModelCall && strings.Contains(ev.Summary, "replayed from the journal") {
				f.AIReplayed++
			}
		}
	}
	f.AICalls, f.AIRepeated = e.model.aiCalls(t.tag)
	return f, nil
}

// runIndex is the index of t's run r in its task.
func runIndex(t *tenant, r agentfleet.Run) (int, bool) {
	tag, i, _, ok := parseTask(r.Message)
	return i, ok && tag == t.tag
}

// effectScript is the side effects a turn's script makes when the bench
// has a target: one POST, whose answer it checks, and one ai() call.
func effectScript(target, tag string, i, k int) string {
	return fmt.Sprintf("  var posted = require('http').post(%q, {tag: %q, run: %d, turn: %d});\n"+
		"  if (posted.status !== 200) throw new Error('side effect: ' + posted.status);\n"+
		"  var said = ai(%q);\n", target+"/effect", tag, i, k, aiPrompt(tag, i, k))
}

// aiPrompt is the prompt of run i's ai() call in turn k.
func aiPrompt(tag string, i, k int) string { return fmt.Sprintf("effect %s %d %d", tag, i, k) }

// isSubCall reports whether a model_call event is a script's ai() call
// rather than its turn's reply.
func isSubCall(ev agentfleet.Event) bool {
	return strings.HasPrefix(ev.Summary, "ai() ") || strings.HasPrefix(ev.Summary, "aiJSON() ")
}

// checkEffects records the side-effect figures of runs in the report,
// and checks them: nothing sent twice or lost, nothing billed twice.
func (e *env) checkEffects(ctx context.Context, st store.Store, t *tenant, runs []agentfleet.Run) error {
	if e.effects == nil {
		return nil
	}
	if st == nil {
		e.rep.note("side effects: not checked against a fleet driven by URL (its store is not the bench's to read)")
		return nil
	}
	f, err := e.effectFigures(ctx, st, t, runs)
	if err != nil {
		return err
	}
	e.rep.Figures.Effects = f
	e.rep.check("side effects once", f.Repeated == 0 && f.Missing == 0 && f.NoKey == 0, false,
		"%d effects repeated (under a second key or none), %d missing, %d POSTs without an Idempotency-Key, of %d; %d POSTs sent again with their key",
		f.Repeated, f.Missing, f.NoKey, f.Expected, f.Resent)
	if f.BilledTwice > 0 {
		// Not a check of the journal's: ai() calls are billed with their
		// entry, once; a turn delivered again and taken for a first
		// attempt asks the model for its reply again and bills it (the
		// engine's FirstAttempt rule).
		e.rep.note("model calls billed twice: %d of %d, turn replies asked again by a redelivered turn taken for a first attempt", f.BilledTwice, f.Billed)
	}
	return nil
}
