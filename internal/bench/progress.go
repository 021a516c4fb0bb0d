// What a bench prints while it runs: lines on the progress writer and
// the progress line that refreshes about once a second.

package bench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

func (e *env) printf(format string, a ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, format, a...)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// say prints a line on the progress writer, above the progress line.
func (e *env) say(format string, a ...any) {
	if e.cfg.ProgressTTY {
		format = "\r\x1b[K" + format
	}
	e.printf(format+"\n", a...)
}

// startProgress shows line() about once a second until stopProgress.
func (e *env) startProgress(line func(elapsed time.Duration) string) {
	w := e.cfg.Progress
	if w == nil {
		return
	}
	e.stopProgress()
	start := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	interval := time.Second
	if !e.cfg.ProgressTTY {
		interval = 10 * time.Second
	}
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if e.cfg.ProgressTTY {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case <-t.C:
				s := line(time.Since(start).Truncate(time.Second))
				if e.cfg.ProgressTTY {
					fmt.Fprintf(w, "\r\x1b[K%s", s)
				} else {
					fmt.Fprintln(w, s)
				}
			}
		}
	}()
	e.progMu.Lock()
	e.progStop = func() { close(stop); <-done }
	e.progMu.Unlock()
}

func (e *env) stopProgress() {
	e.progMu.Lock()
	stop := e.progStop
	e.progStop = nil
	e.progMu.Unlock()
	if stop != nil {
		stop()
	}
}

// turnRate returns a progress line of runs done and model calls (turns)
// per second over the last interval.
func (e *env) turnRate(total int) func(time.Duration) string {
	lastServed, lastAt := e.model.served(), time.Now()
	base := int(e.model.finals.Load())
	return func(elapsed time.Duration) string {
		s, now := e.model.served(), time.Now()
		rate := float64(s-lastServed) / now.Sub(lastAt).Seconds()
		lastServed, lastAt = s, now
		done := min(int(e.model.finals.Load())-base, total)
		return fmt.Sprintf("%s %s: %d/%d runs done, %.0f turns/s, %d model calls in flight",
			elapsed, e.cfg.Scenario, done, total, rate, e.model.inflight())
	}
}
