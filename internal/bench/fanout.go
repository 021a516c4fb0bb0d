package bench

import (
	"context"
	"fmt"
	"time"
)

// fanout has every run spawn Children one-turn children in its first
// turn and wait for them; its second turn answers once they all
// completed. It measures how soon a parent resumes once its last child
// has ended: from that child's end (its updated_at, set by the commit
// that ended it) to the model's request for the parent's second turn.
// That spans the child's commit, the family's settling, the parent's
// wake and its turn's trip through the queues and its load.
func (e *env) fanout(ctx context.Context) error {
	e.rep.Parameters.Submitters = e.cfg.Submitters
	if err := e.warmup(ctx, e.cfg.Warmup); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "fanout")
	if err != nil {
		return err
	}
	e.model.setFanout(t.tag, FanoutChildren)
	e.model.setTiming(true, nil)
	defer e.model.setTiming(false, nil)
	e.startProgress(e.turnRate(e.cfg.Runs * (1 + FanoutChildren)))
	start := time.Now()
	subs, submitErrs := e.submit(ctx, t, 0, e.cfg.Runs, e.cfg.Submitters)
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	counts, runs, _, err := e.finish(ctx, t, subs, submitErrs, waitErr)
	if err != nil {
		return err
	}
	lastChildEnd := map[string]time.Time{}
	children := 0
	for _, r := range runs {
		if r.ParentRunID == "" {
			continue
		}
		children++
		if r.UpdatedAt.After(lastChildEnd[r.ParentRunID]) {
			lastChildEnd[r.ParentRunID] = r.UpdatedAt
		}
	}
	var resume []time.Duration
	for _, s := range subs {
		resumed, ok := e.model.requestAt(taskMessage(t.tag, s.i, 2), 2)
		end, ended := lastChildEnd[s.id]
		if ok && ended {
			resume = append(resume, resumed.Sub(end))
		}
	}
	f := &FanoutFigures{
		Parents: len(subs), Children: children, ChildrenPerParent: FanoutChildren,
		Wall: Duration(detected.Sub(start)), Resume: summarize(resume),
	}
	e.rep.Figures.Fanout = f
	e.rep.checkRuns()
	e.rep.check("every child ran", children == counts.Completed*FanoutChildren, false,
		"%d children for %d completed parents of %d each", children, counts.Completed, FanoutChildren)
	e.rep.check("parents resume soon after their last child", f.Resume.N > 0 && time.Duration(f.Resume.P99) <= FanoutResumeBound, true,
		"resume p50 %s, p99 %s over %d parents (bound %s)", f.Resume.P50, f.Resume.P99, f.Resume.N, FanoutResumeBound)
	return nil
}

// FanoutChildren is how many children each fanout run spawns, and
// FanoutResumeBound the goal for a parent's resumption after its last
// child ended.
const (
	FanoutChildren    = 5
	FanoutResumeBound = 50 * time.Millisecond
)

// FanoutFigures: parents spawning children and waiting for them.
type FanoutFigures struct {
	Parents           int      `json:"parents"`
	Children          int      `json:"children"`
	ChildrenPerParent int      `json:"children_per_parent"`
	Wall              Duration `json:"wall"`
	// Resume is from a parent's last child's end to the model's request
	// for the parent's next turn.
	Resume Summary `json:"resume"`
}

// childTask is the task of child j of fanout run i: a one-turn run.
func childTask(tag string, i, j int) string {
	return taskMessage(tag+"-child", i*1000+j, 1)
}

// fanoutReply is the model's answer to turn k of fanout run i: spawn the
// children and wait, then answer once they all completed.
func fanoutReply(tag string, i, k, children int) string {
	if k == 1 {
		return fmt.Sprintf("Fan out.\n```javascript\nfunction run(args) {\n"+
			"  var ids = [];\n  for (var j = 0; j < %d; j++) ids.push(spawn({message: %q + (%d + j) + %q}));\n"+
			"  wait(ids);\n  return {step: 1};\n}\n```",
			children, "bench "+tag+"-child run ", i*1000, " of 1 turns")
	}
	return fmt.Sprintf("Gather.\n```javascript\nfunction run(args) {\n"+
		"  var ok = args.children.every(function (c) { return c.status === 'completed' });\n"+
		"  answer(ok ? 'done %d 2' : 'children: ' + JSON.stringify(args.children));\n}\n```", i)
}
