package bench

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// barrierTimeout bounds how long the fake model holds first turns waiting
// for all of them: under the model client's 120s call timeout, so a
// fleet that cannot hold them all fails the check rather than retrying.
const barrierTimeout = 90 * time.Second

// scale puts Runs runs in flight at once on a slow model (one worker with
// as many slots by default) and checks they all complete. It measures the
// resident memory of this process and its descendants while they are in
// flight against the idle fleet's, per in-flight turn.
//
// A fleet admits turns only so fast, and a model's latency of a few
// seconds does not cover submitting thousands of runs, so the fake model
// holds its replies to the runs' first turns (after the latency) until
// all of them are in flight: a plateau of exactly Runs turns at once, on
// any machine. How long that took is the ramp time.
func (e *env) scale(ctx context.Context) error {
	e.rep.Parameters.Submitters = e.cfg.Submitters
	if err := e.warmup(ctx, e.cfg.Warmup); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "scale")
	if err != nil {
		return err
	}
	k := e.cfg.Runs
	local := e.fleet.local()
	f := &ScaleFigures{InFlightTarget: k}
	if local {
		// Let the warm-up's garbage go before reading the idle size.
		runtime.GC()
		time.Sleep(time.Second)
		f.IdleRSS = rssTree()
		f.idleHeap, f.idleStacks = goMemory()
	} else {
		e.rep.note("memory is measured only for a fleet the bench runs (not with --url)")
	}
	served0 := e.model.served()

	var arrivedMu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll()
	var plateauAt time.Time
	e.model.setTiming(false, func(task string, turn int) {
		if turn != 1 || !strings.HasPrefix(task, "bench "+t.tag+" ") {
			return
		}
		arrivedMu.Lock()
		arrived++
		if arrived == k {
			plateauAt = time.Now()
			if e.cfg.HeapProfile != "" {
				if err := writeHeapProfile(e.cfg.HeapProfile); err != nil {
					e.rep.note("heap profile: %v", err)
				} else {
					e.rep.note("heap profile of the plateau (after a GC: live objects) in %s, goroutine profile in %s.goroutines", e.cfg.HeapProfile, e.cfg.HeapProfile)
				}
			}
			releaseAll()
		}
		arrivedMu.Unlock()
		select {
		case <-release:
		case <-time.After(barrierTimeout):
			releaseAll()
		}
	})
	defer e.model.setTiming(false, nil)

	start := time.Now()
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var rs rssSampler
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			in := e.model.inflight()
			var rss int64
			if local {
				rss = rs.sample()
			}
			mu.Lock()
			if in > f.PeakInFlight {
				f.PeakInFlight = in
			}
			if rss > f.PeakRSS {
				f.PeakRSS = rss
				f.GoroutinesPeak = runtime.NumGoroutine()
				f.HeapObjectsPeak, f.StacksPeak = goMemory()
			}
			mu.Unlock()
		}
	}()
	e.startProgress(e.turnRate(k))
	subs, submitErrs := e.submit(ctx, t, 0, k, e.cfg.Submitters)
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	close(stop)
	<-sampled
	counts, _, last, err := e.finish(ctx, t, subs, submitErrs, waitErr)
	if err != nil {
		return err
	}
	arrivedMu.Lock()
	if !plateauAt.IsZero() {
		f.RampTime = durPtr(plateauAt.Sub(start))
	}
	arrivedMu.Unlock()
	wall := wallTime(start, last, detected)
	f.Wall = Duration(wall)
	f.TurnsPerSec = float64(counts.Turns) / wall.Seconds()
	if local {
		f.RSSPerInFlightTurn = (f.PeakRSS - f.IdleRSS) / int64(k)
		e.rep.note("RSS is VmRSS of this process (fleet, fake model, bench client) and its descendants (sandbox or fleet processes), sampled every 100ms; shared pages count once per process")
		e.rep.note("the fake model runs in this process: its server side of the connections and the requests it holds until it replies are in the peak")
		if _, embedded := e.fleet.(*embeddedFleet); embedded {
			proto := "HTTP/2 without TLS, the calls sharing a few connections, as a client over TLS to a provider does"
			if e.cfg.ModelHTTP1 {
				proto = "HTTP/1.1, a connection per call in flight (--model-http1)"
			}
			e.rep.note("the embedded fleet's model client speaks %s", proto)
		}
	}
	if local {
		idleHeap, idleStacks := f.idleHeap, f.idleStacks
		e.rep.note("at the peak, this process's Go heap held %s more live and not-yet-collected objects and %s more goroutine stacks than idle, i.e. %.1f KiB and %.1f KiB per in-flight turn",
			mib(f.HeapObjectsPeak-idleHeap), mib(f.StacksPeak-idleStacks),
			float64(f.HeapObjectsPeak-idleHeap)/1024/float64(k), float64(f.StacksPeak-idleStacks)/1024/float64(k))
	}
	e.rep.Figures.Scale = f
	e.rep.checkRuns()
	e.rep.check("all runs in flight at once", f.RampTime != nil, false,
		"peak %d model calls in flight of %d", f.PeakInFlight, k)
	e.rep.note("the fake model held the first turns' replies until all %d were in flight (at most %s), then answered them all: the plateau; ramp time is how long the fleet took to get there", k, barrierTimeout)
	if calls := e.model.served() - served0; calls > counts.Turns {
		e.rep.note("the model served %d calls for %d turns", calls, counts.Turns)
	}
	return nil
}

// writeHeapProfile writes a heap profile of the live objects.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The goroutines next to it: what each in-flight turn keeps waiting.
	g, err := os.Create(path + ".goroutines")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(g, 0); err != nil {
		g.Close()
		return err
	}
	return g.Close()
}

// goMemory reads this process's heap objects (live and not yet swept)
// and goroutine stack bytes.
func goMemory() (heap, stacks int64) {
	ss := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(ss)
	for i, s := range ss {
		if s.Value.Kind() != metrics.KindUint64 {
			continue
		}
		v := int64(s.Value.Uint64())
		if i == 0 {
			heap = v
		} else {
			stacks = v
		}
	}
	return heap, stacks
}
