package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// clusterChaos is chaos on a NATS cluster (Config.NATSCluster nodes, R3
// streams): while the runs go through the fleet it SIGKILLs the node
// leading AF_WORK (from the stream's info) and brings it back as a new
// machine, with an empty store; once every stream reports its replicas
// current again it SIGKILLs the node leading AF_RUNQ and leaves it down
// until the load is done. Every run must complete, none may be lost, no
// turn may be committed twice, model calls may be repeated at most as
// many as were in flight at the kills, and the longest time no model
// call started after each kill is the fleet's time without scheduling.
func (e *env) clusterChaos(ctx context.Context) error {
	pf := e.procs
	t, err := e.tenant(ctx, "chaos")
	if err != nil {
		return err
	}
	obs, err := bus.Connect(ctx, bus.Config{URL: pf.natsURL(), Name: "agentctl-bench-observer", Observer: true, RequestTimeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("observe the NATS cluster: %w", err)
	}
	defer obs.Close()
	f := &ChaosFigures{}
	pauses := watchPauses(e.model)
	defer pauses.stop()
	e.startProgress(e.turnRate(e.cfg.Runs))
	start := time.Now()
	subs, submitErrs := e.submit(ctx, t, 0, e.cfg.Runs, 8)

	stepAt := func(what string, frac float64, do func(context.Context) (string, error)) {
		n, err := e.waitDone(ctx, t, int(frac*float64(len(subs))))
		if err != nil {
			e.rep.note("before %q: %v", what, err)
			return
		}
		at := time.Since(start)
		if len(f.Timeline) > 0 {
			f.Timeline[len(f.Timeline)-1].Pause = ptr(Duration(pauses.window(true)))
		} else {
			pauses.window(true)
		}
		step := ChaosStep{At: Duration(at), What: what, Done: n, InFlight: e.model.inflight()}
		step.Note, err = do(ctx)
		step.Took = Duration(time.Since(start) - at)
		if err != nil {
			step.Failed = true
			step.Note = strings.TrimSpace(step.Note + " " + err.Error())
		}
		f.Timeline = append(f.Timeline, step)
		e.say("%s at %s: %s", what, Duration(at), orDash(step.Note))
	}
	stepAt("SIGKILL the node leading AF_WORK, bring it back with an empty store, wait until every stream's replicas are current", 0.2,
		func(ctx context.Context) (string, error) {
			i, err := streamLeaderNode(ctx, obs, pf, "AF_WORK")
			if err != nil {
				return "", err
			}
			pf.killNATS(i, true)
			killed := time.Now()
			if err := pf.startNATS(ctx, i, true); err != nil {
				return "", fmt.Errorf("start %s again: %w", pf.nats[i].name, err)
			}
			if err := waitReplicasCurrent(ctx, obs, 2*time.Minute); err != nil {
				return pf.nats[i].name, err
			}
			return fmt.Sprintf("%s; every stream's replicas current %s after the kill", pf.nats[i].name, Duration(time.Since(killed))), nil
		})
	stepAt("SIGKILL the node leading AF_RUNQ, leave it down", 0.5, func(ctx context.Context) (string, error) {
		i, err := streamLeaderNode(ctx, obs, pf, "AF_RUNQ")
		if err != nil {
			return "", err
		}
		pf.killNATS(i, true)
		return pf.nats[i].name + " down until the end", nil
	})
	err = e.chaosVerdict(ctx, t, f, start, subs, submitErrs)
	if n := len(f.Timeline); n > 0 {
		f.Timeline[n-1].Pause = ptr(Duration(pauses.window(false)))
	}
	inFlight := 0
	for _, s := range f.Timeline {
		inFlight += s.InFlight
		if s.Pause != nil {
			f.LongestPause = max(f.LongestPause, *s.Pause)
		}
	}
	e.rep.check("model calls repeated at most the in-flight ones", f.RepeatedCalls <= inFlight, false,
		"%d repeated, %d in flight at the kills", f.RepeatedCalls, inFlight)
	return err
}

func ptr[T any](v T) *T { return &v }

// streamLeaderNode is the index of the node leading stream, waiting for
// the stream to have a leader.
func streamLeaderNode(ctx context.Context, obs *bus.Bus, pf *procFleet, stream string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		all, err := obs.Replicas(ctx)
		if err == nil {
			last = fmt.Errorf("%s has no leader", stream)
			for _, r := range all {
				if r.Stream == stream && r.Leader != "" {
					return pf.natsNodeNamed(r.Leader)
				}
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("find the node leading %s: %w", stream, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReplicasCurrent waits until every stream of the fleet has its
// leader and every replica caught up.
func waitReplicasCurrent(ctx context.Context, obs *bus.Bus, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error = errors.New("not asked yet")
	for {
		all, err := obs.Replicas(ctx)
		if err == nil {
			last = nil
			for _, r := range all {
				if !r.Current() {
					last = fmt.Errorf("%s: leader %q, peers %+v", r.Stream, r.Leader, r.Peers)
					break
				}
			}
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicas not current after %s: %w", within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pauseWatch samples how many model calls have started, every few
// milliseconds, and keeps the longest stretch in which none did.
type pauseWatch struct {
	m       *model
	mu      sync.Mutex
	last    time.Time // when the count last moved
	longest time.Duration
	done    chan struct{}
	wg      sync.WaitGroup
}

func watchPauses(m *model) *pauseWatch {
	w := &pauseWatch{m: m, last: time.Now(), done: make(chan struct{})}
	w.wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		seen := m.srv.Requests()
		for {
			select {
			case <-w.done:
				return
			case now := <-tick.C:
				if n := m.srv.Requests(); n != seen {
					seen = n
					w.mu.Lock()
					w.longest = max(w.longest, now.Sub(w.last))
					w.last = now
					w.mu.Unlock()
				}
			}
		}
	})
	return w
}

// window is the longest pause since the last window began, and begins a
// new one; ongoing counts the pause under way (the load goes on; at its
// end the fleet is idle, not paused).
func (w *pauseWatch) window(ongoing bool) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.longest
	if ongoing {
		d = max(d, time.Since(w.last))
	}
	w.longest = 0
	return d
}

func (w *pauseWatch) stop() {
	close(w.done)
	w.wg.Wait()
}
