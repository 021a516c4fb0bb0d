package group_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/group"
)

type call struct {
	id  int
	ran atomic.Bool
}

// Calls made while a group runs go out together in the next group, every
// call runs exactly once, groups never overlap and never exceed the limit.
func TestQueueGroupsCallsThatWait(t *testing.T) {
	var q group.Queue[*call]
	var running atomic.Int32
	var mu sync.Mutex
	var sizes []int
	release := make(chan struct{})
	run := func(calls []*call) {
		if running.Add(1) != 1 {
			t.Error("two groups ran at once")
		}
		defer running.Add(-1)
		mu.Lock()
		sizes = append(sizes, len(calls))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release // hold the first group while the others queue
		}
		for _, c := range calls {
			if c.ran.Swap(true) {
				t.Errorf("call %d ran twice", c.id)
			}
		}
	}
	const n, limit = 25, 10
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = &call{id: i}
	}
	var wg sync.WaitGroup
	wg.Go(func() { q.Do(calls[0], limit, run) })
	for len(func() []int { mu.Lock(); defer mu.Unlock(); return sizes }()) == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, c := range calls[1:] {
		wg.Go(func() {
			q.Do(c, limit, run)
			if !c.ran.Load() {
				t.Errorf("call %d returned before it ran", c.id)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // the other callers queue up
	close(release)
	wg.Wait()
	for _, c := range calls {
		if !c.ran.Load() {
			t.Errorf("call %d never ran", c.id)
		}
	}
	want := []int{1, 10, 10, 4}
	if len(sizes) != len(want) {
		t.Fatalf("group sizes %v, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("group sizes %v, want %v", sizes, want)
		}
	}
}

// A lone call runs at once, in a group of its own, on its caller.
func TestQueueLoneCall(t *testing.T) {
	var q group.Queue[*call]
	c := &call{}
	groups := 0
	q.Do(c, 8, func(calls []*call) {
		groups++
		for _, x := range calls {
			x.ran.Store(true)
		}
	})
	if !c.ran.Load() || groups != 1 {
		t.Fatalf("ran %v in %d groups", c.ran.Load(), groups)
	}
}

// With a Linger, calls far apart each run at once, alone; calls that come
// fast (here four a millisecond, each group taking no time) share groups
// they would not have shared without it. The Linger is long enough that a
// call descheduled on a loaded machine (5ms seen under -race in CI) is not
// taken for one that lingered.
func TestQueueLingersOnlyWhenCallsComeFast(t *testing.T) {
	t.Parallel()
	q := group.Queue[*call]{Linger: 20 * time.Millisecond}
	var mu sync.Mutex
	var sizes []int
	run := func(calls []*call) {
		mu.Lock()
		sizes = append(sizes, len(calls))
		mu.Unlock()
	}
	var took []time.Duration
	for i := range 10 {
		start := time.Now()
		q.Do(&call{id: i}, 64, run)
		took = append(took, time.Since(start))
		time.Sleep(q.Linger + q.Linger/4) // apart: more than Linger/2
	}
	for i, d := range took {
		if d >= q.Linger {
			t.Errorf("sparse call %d took %s: it lingered", i, d)
		}
	}

	mu.Lock()
	sizes = nil
	mu.Unlock()
	var wg sync.WaitGroup
	const n = 400
	for i := range n {
		wg.Go(func() { q.Do(&call{id: i}, 64, run) })
		if i%4 == 3 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if avg := float64(n) / float64(len(sizes)); avg < 4 {
		t.Errorf("frequent calls: %d groups for %d calls (%.1f a group), want at least 4 a group", len(sizes), n, avg)
	}
}

// A leader whose group is large already runs it at once: callers that
// pile up faster than groups run are not kept waiting for more.
func TestQueueDoesNotLingerWithAFullGroup(t *testing.T) {
	t.Parallel()
	q := group.Queue[*call]{Linger: 50 * time.Millisecond}
	release := make(chan struct{})
	var mu sync.Mutex
	var started []time.Time
	var sizes []int
	run := func(calls []*call) {
		mu.Lock()
		started = append(started, time.Now())
		sizes = append(sizes, len(calls))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { q.Do(&call{id: 0}, 64, run) })
	time.Sleep(20 * time.Millisecond) // the first group is running
	for i := range 2 * group.LingerGroup {
		wg.Go(func() { q.Do(&call{id: i + 1}, 64, run) })
	}
	time.Sleep(20 * time.Millisecond) // they are queued
	released := time.Now()
	close(release)
	wg.Wait()
	if len(sizes) != 2 || sizes[1] != 2*group.LingerGroup {
		t.Fatalf("groups %v, want [1 %d]", sizes, 2*group.LingerGroup)
	}
	if waited := started[1].Sub(released); waited >= q.Linger/2 {
		t.Errorf("the second group started %s after the first ended: it lingered", waited)
	}
}
