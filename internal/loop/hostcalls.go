// The script's host calls that reach past the sandbox: ai()/aiJSON()
// sub-calls of the model and spawn()/wait() of child runs, each held to
// the turn's and the run's limits.

package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// aiFunc is the ai()/aiJSON() sub-call of this turn's script: metered
// through the same budget as the turn, its usage counted in the turn's,
// and held to the run's max_tokens and the turn's model call cap. A
// refused call is an error the script can catch.
func (t *turn) aiFunc() agentfleet.AIFunc {
	return func(ctx context.Context, req agentfleet.AIRequest) (agentfleet.AIResponse, error) {
		cfg := &t.e.cfg
		system := "Answer the request directly and concisely."
		if req.JSON || len(req.Schema) > 0 {
			system = "Reply with one JSON value only, no prose."
			if len(req.Schema) > 0 {
				system += " It must match this JSON Schema: " + string(req.Schema)
			}
		}
		// A script may put in its prompt what it read with secret().
		msgs := []agentfleet.ChatMessage{{Role: agentfleet.RoleSystem, Content: system}, {Role: agentfleet.RoleUser, Content: t.clean(req.Prompt)}}
		prompt := agentfleet.EstimateTokens(msgs)
		maxTokens, err := t.admitSubCall(prompt)
		if err != nil {
			return agentfleet.AIResponse{}, err
		}
		mreq := agentfleet.ModelRequest{
			Model: firstNonEmpty(t.in.Agent.Model, cfg.DefaultModel), Messages: msgs,
			MaxTokens: int(maxTokens), JSON: req.JSON || len(req.Schema) > 0,
		}
		var resp agentfleet.ModelResponse
		if t.journal != nil {
			resp, err = t.journal.call(ctx, req.Index, mreq, prompt+maxTokens)
		} else {
			resp, err = t.e.meteredCall(ctx, t.run, mreq, prompt+maxTokens)
		}
		t.mu.Lock()
		t.subUsage = t.subUsage.Add(resp.Usage)
		t.mu.Unlock()
		if err != nil {
			return agentfleet.AIResponse{}, err
		}
		t.emit(agentfleet.Event{Type: agentfleet.EventModelCall, Summary: "ai() " + resp.Model,
			Tokens: &agentfleet.Tokens{Prompt: resp.Usage.PromptTokens, Completion: resp.Usage.CompletionTokens}})
		return agentfleet.AIResponse{Content: resp.Content, Usage: resp.Usage}, nil
	}
}

// spawnFunc is spawn() for this turn's script: the caller's Spawn, held
// to the run's limits, each child announced with a child_spawned event.
func (t *turn) spawnFunc() agentfleet.SpawnFunc {
	if t.in.Spawn == nil {
		return nil
	}
	cfg := &t.e.cfg
	return func(ctx context.Context, index int, req agentfleet.SpawnRequest) (string, error) {
		if depth := t.run.Depth + 1; depth > cfg.MaxDepth {
			return "", fmt.Errorf("runs nest at most %d deep and a child of this run would be at depth %d: do the work in this run", cfg.MaxDepth, depth)
		}
		t.mu.Lock()
		n := t.run.Children + t.spawned
		t.mu.Unlock()
		if n >= cfg.MaxChildren {
			return "", fmt.Errorf("a run spawns at most %d children (max_children) and this one has %d", cfg.MaxChildren, n)
		}
		req.Message = t.clean(req.Message)
		req.Context = t.redact.JSON(req.Context)
		id, err := t.in.Spawn(ctx, index, req)
		if err != nil {
			return "", err
		}
		t.mu.Lock()
		t.spawned++
		if t.spawnedIDs == nil {
			t.spawnedIDs = map[string]bool{}
		}
		t.spawnedIDs[id] = true
		t.mu.Unlock()
		t.emit(agentfleet.Event{Type: agentfleet.EventChildSpawned, Summary: id, Content: t.clean(req.Message)})
		return id, nil
	}
}

// isChild is wait()'s check of an id: a child this turn spawned, or one
// the caller's IsChild knows.
func (t *turn) isChild(ctx context.Context, id string) (bool, error) {
	t.mu.Lock()
	mine := t.spawnedIDs[id]
	t.mu.Unlock()
	if mine || t.in.IsChild == nil {
		return mine, nil
	}
	return t.in.IsChild(ctx, id)
}

// admitSubCall counts a sub-call of prompt tokens against the turn's
// model call cap and the run's max_tokens, and returns the most it may
// complete.
func (t *turn) admitSubCall(prompt int64) (maxTokens int64, err error) {
	cfg := &t.e.cfg
	limit := firstPositive(t.in.Agent.MaxModelCallsPerTurn, cfg.MaxModelCallsPerTurn)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.calls >= limit {
		return 0, fmt.Errorf("this turn has made %d model calls, the most its agent allows (max_model_calls_per_turn %d): return what you have and go on next turn", t.calls, limit)
	}
	maxTokens = int64(cfg.AIMaxTokens)
	if run := t.run; run.MaxTokens > 0 {
		used := run.Usage.Total() + t.res.Usage.Total() + t.subUsage.Total()
		left := run.MaxTokens - used - prompt
		if left < 1 {
			return 0, fmt.Errorf("the run's max_tokens (%d) leaves no room for this call: %d used, its prompt about %d", run.MaxTokens, used, prompt)
		}
		maxTokens = min(maxTokens, left)
	}
	t.calls++
	return maxTokens, nil
}

// toolEvent publishes a tool_call or tool_result event of the script's
// tool modules (the sandbox cuts bodies; emit redacts), held to the
// event cap: Args past EventArgsMaxBytes are replaced by a note.
func (t *turn) toolEvent(ev agentfleet.Event) {
	if len(ev.Args) > EventArgsMaxBytes {
		ev.Args = json.RawMessage(fmt.Sprintf(`{"truncated":true,"bytes":%d}`, len(ev.Args)))
	}
	if len(ev.Summary) > EventArgsMaxBytes {
		ev.Summary = strings.ToValidUTF8(ev.Summary[:EventArgsMaxBytes], "")
	}
	t.emit(ev)
}
