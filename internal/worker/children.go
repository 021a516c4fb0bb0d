package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// ChildRunID is the id of the child a run's turn spawns with its
// index-th spawn() call: derived, not drawn, so a turn that runs again
// (after a crash, or a commit that failed) finds the children it already
// spawned instead of spawning them twice. It has a UUID's shape.
func ChildRunID(parent string, turn, index int) string {
	sum := sha256.Sum256([]byte(parent + "/" + strconv.Itoa(turn) + "/" + strconv.Itoa(index)))
	h := hex.EncodeToString(sum[:16])
	// Version 8 (custom), variant 10.
	b := []byte(h)
	b[12] = '8'
	b[16] = "89ab"[sum[8]&3]
	return string(b[0:8]) + "-" + string(b[8:12]) + "-" + string(b[12:16]) + "-" + string(b[16:20]) + "-" + string(b[20:32])
}

// spawner is spawn() for turn of run: a child of the same tenant,
// created in the store (its id derived from the call), its queued event
// published and its first turn enqueued.
func (w *Worker) spawner(ctx context.Context, run agentfleet.Run, turn int) agentfleet.SpawnFunc {
	return func(_ context.Context, index int, req agentfleet.SpawnRequest) (string, error) {
		return w.spawn(ctx, run, turn, index, req)
	}
}

func (w *Worker) spawn(ctx context.Context, parent agentfleet.Run, turn, index int, req agentfleet.SpawnRequest) (string, error) {
	id := ChildRunID(parent.ID, turn, index)
	agent := req.Agent
	if agent == "" {
		agent = parent.Agent
	}
	queued := agentfleet.Event{V: agentfleet.EventVersion, Type: agentfleet.EventQueued, Summary: "child of " + parent.ID}
	res, err := w.cfg.Store.RunCreate(ctx, store.RunCreateParams{
		ID: id, Tenant: parent.Tenant, Agent: agent, Message: req.Message, Context: req.Context, Metadata: req.Metadata,
		MaxTurns: req.MaxTurns, MaxTokens: req.MaxTokens, ParentRunID: parent.ID, Depth: parent.Depth + 1,
		IdempotencyKey: "spawn/" + id, Events: []agentfleet.Event{queued},
	})
	var full *store.QueueFullError
	switch {
	case errors.As(err, &full):
		return "", fmt.Errorf("the tenant has %d runs not finished, its most (max_queued_runs %d): wait for children to end before spawning more", full.Unfinished, full.Limit)
	case errors.Is(err, store.ErrUnknownAgent):
		return "", fmt.Errorf("no agent %q: spawn one of the tenant's agents (or leave agent out for this run's)", agent)
	case errors.Is(err, store.ErrInvalid):
		return "", err
	case err != nil:
		return "", fmt.Errorf("create the child run: %w", err)
	}
	evs := res.Events
	if !res.Created {
		// Spawned by an earlier attempt of this turn, which may have
		// died before it published: publish again (deduplicated).
		if evs, err = w.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: id}); err != nil {
			return "", fmt.Errorf("load the child run's events: %w", err)
		}
	}
	// A child has no session: it may start at once.
	if err := w.owed(nil).Admitted(ctx, store.RunCreateResult{Run: res.Run, Events: evs, Startable: true}, ""); err != nil {
		return "", err
	}
	return id, nil
}

// childOf says for wait() whether an id names a child of run: a run of
// its tenant whose parent it is. Another tenant's run is not found.
func (w *Worker) childOf(run agentfleet.Run) func(ctx context.Context, id string) (bool, error) {
	return func(ctx context.Context, id string) (bool, error) {
		if len(id) != len(run.ID) && len(id) != 36 {
			return false, nil // not a run id's shape: no lookup
		}
		child, err := w.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: id, Tenant: run.Tenant})
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("load run %s: %w", id, err)
		}
		return child.ParentRunID == run.ID, nil
	}
}

// children loads the children run waits for (Run.WaitIDs).
func (w *Worker) children(ctx context.Context, run agentfleet.Run) ([]agentfleet.Run, error) {
	var out []agentfleet.Run
	p := store.RunListParams{Tenant: run.Tenant, ParentRunID: run.ID, Limit: 1000}
	for {
		page, err := w.cfg.Store.RunList(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("load the children of run %s: %w", run.ID, err)
		}
		out = append(out, page.Runs...)
		if page.NextCursor == "" {
			return out, nil
		}
		p.Cursor = page.NextCursor
	}
}
