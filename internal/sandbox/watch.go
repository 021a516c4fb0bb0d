package sandbox

import (
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/procstat"
)

// turnWatch is the parent's hard deadline on a turn: if the child has not
// reported once it has used its CPU time plus a grace, or within a grace
// after a cancel, the process is killed. It never fires for a child that
// interrupts itself in time.
//
// The budget is the child's CPU time, which the parent reads from /proc
// (procstat). A timer sleeps for the budget left in wall time (the
// clock stopped during host calls, when the child waits); when it fires
// and the child, on a busy machine, has used less CPU than that, the
// timer sleeps again for the rest. Where /proc cannot be read the
// budget is that wall time. After a cancel the grace is wall time: the
// turn must end. (A child that neither computes nor reports, which only
// a bug would make, is ended that way too: by the turn's wall-clock
// timeout and its grace.)
type turnWatch struct {
	c   *child
	seq uint64

	mu       sync.Mutex
	timer    *time.Timer
	gen      int           // invalidates callbacks of superseded timers
	budget   time.Duration // CPU time the turn may use, grace included
	left     time.Duration // budget left when the current segment began
	segStart time.Time
	paused   bool
	done     bool
	killed   stopReason // why the watch killed the process
	stopped  stopReason // why the turn was cancelled, if it was
}

func startWatch(c *child, seq uint64, budget time.Duration) *turnWatch {
	w := &turnWatch{c: c, seq: seq, budget: budget, left: budget}
	w.mu.Lock()
	w.arm()
	w.mu.Unlock()
	return w
}

// arm starts a timer for the budget left; w.mu held.
func (w *turnWatch) arm() {
	w.gen++
	gen := w.gen
	w.segStart = time.Now()
	w.timer = time.AfterFunc(w.left, func() { w.fire(gen) })
}

func (w *turnWatch) disarm() {
	w.gen++
	w.timer.Stop()
	w.left -= time.Since(w.segStart)
}

func (w *turnWatch) fire(gen int) {
	w.mu.Lock()
	if w.done || w.paused || gen != w.gen {
		w.mu.Unlock()
		return
	}
	if w.stopped == stopNone {
		if left := w.cpuLeft(); left > 0 {
			w.left = max(left, minCPUCheck)
			w.arm()
			w.mu.Unlock()
			return
		}
	}
	w.killed = stopTimeout
	if w.stopped != stopNone {
		w.killed = w.stopped
	}
	w.done = true
	w.mu.Unlock()
	w.c.kill()
}

// cpuLeft is the CPU time the child may still use this turn; zero when
// it cannot be read (the process is gone, or there is no /proc).
func (w *turnWatch) cpuLeft() time.Duration {
	st, ok := procstat.Read(w.c.cmd.Process.Pid)
	if !ok {
		return 0
	}
	return w.budget - (st.CPU - w.c.cpuMark)
}

func (w *turnWatch) pause() {
	w.mu.Lock()
	if !w.done && !w.paused {
		w.paused = true
		w.disarm()
	}
	w.mu.Unlock()
}

func (w *turnWatch) resume() {
	w.mu.Lock()
	if !w.done && w.paused {
		w.paused = false
		w.arm()
	}
	w.mu.Unlock()
}

// cancel asks the child to stop and shortens the deadline to the grace.
func (w *turnWatch) cancel(r stopReason) {
	w.mu.Lock()
	if w.done || w.stopped != stopNone {
		w.mu.Unlock()
		return
	}
	w.stopped = r
	if w.paused {
		w.left = min(w.left, killGrace)
	} else {
		w.disarm()
		w.left = min(w.left, killGrace)
		w.arm()
	}
	// Written under w.mu: once finish returns, no cancel for this turn
	// can reach the child, so it cannot hit the next turn. (The child
	// also checks the sequence number.)
	var e encoder
	e.start(frameCancel)
	e.uint(w.seq)
	e.byte(byte(r))
	_, _ = w.c.ctl.Write(e.frame())
	w.mu.Unlock()
}

// finish ends the watch and says whether (and why) it killed the process.
func (w *turnWatch) finish() stopReason {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		w.gen++
		w.timer.Stop()
	}
	return w.killed
}
