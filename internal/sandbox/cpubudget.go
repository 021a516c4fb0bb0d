package sandbox

import (
	"sync"
	"time"
)

// cpuBudget is a turn's CPU time limit, kept inside the sandbox process.
// It counts the process's CPU time (processCPU), not the wall clock: on a
// busy machine a script waiting for a core has not used its budget, and
// a worker with many turns running must not fail the slower ones as
// endless loops. The process serves one turn at a time, on one P by
// default (Config.ChildProcs), so its CPU time is the script's (and the
// collections its garbage costs). Host calls pause the budget: the script is not running then.
//
// Between checks it sleeps on a wall-clock timer for the budget left,
// which CPU time on one P cannot outrun (with Config.ChildProcs above 1
// the collector's parallel work can, by that factor at most); when the
// timer fires it reads the CPU time and either stops the turn or sleeps
// again for what is left.
type cpuBudget struct {
	mu      sync.Mutex
	limit   time.Duration
	used    time.Duration // CPU time of the segments that ended
	start   time.Duration // processCPU when the current segment began
	running bool
	spent   bool // expire was called
	timer   *time.Timer
	expire  func()
}

// minCPUCheck spaces the checks of a budget nearly spent.
const minCPUCheck = time.Millisecond

// startCPUBudget starts counting limit; expire is called once, from
// another goroutine, when it is spent.
func startCPUBudget(limit time.Duration, expire func()) *cpuBudget {
	b := &cpuBudget{limit: limit, expire: expire, running: true, start: processCPU()}
	b.mu.Lock()
	b.timer = time.AfterFunc(limit, b.check)
	b.mu.Unlock()
	return b
}

func (b *cpuBudget) check() {
	b.mu.Lock()
	if !b.running {
		b.mu.Unlock()
		return
	}
	left := b.limit - b.used - (processCPU() - b.start)
	if left > 0 {
		b.timer.Reset(max(left, minCPUCheck))
		b.mu.Unlock()
		return
	}
	b.running, b.spent = false, true
	b.mu.Unlock()
	b.expire()
}

// pause stops counting (a host call begins).
func (b *cpuBudget) pause() {
	b.mu.Lock()
	if b.running {
		b.used += processCPU() - b.start
		b.running = false
		b.timer.Stop()
	}
	b.mu.Unlock()
}

// resume counts again (a host call ended); false if the budget is spent,
// in which case expire has been called.
func (b *cpuBudget) resume() bool {
	b.mu.Lock()
	if b.running || b.spent {
		spent := b.spent
		b.mu.Unlock()
		return !spent
	}
	left := b.limit - b.used
	if left <= 0 {
		b.spent = true
		b.mu.Unlock()
		b.expire()
		return false
	}
	b.running = true
	b.start = processCPU()
	b.timer.Reset(left)
	b.mu.Unlock()
	return true
}

// stop ends the budget. A check that found it spent just before may
// still be calling expire; turnCtl.stop, the expire of a turn, tolerates
// that (it acts once, on that turn's runtime only).
func (b *cpuBudget) stop() {
	b.mu.Lock()
	b.running = false
	b.spent = true
	b.timer.Stop()
	b.mu.Unlock()
}
