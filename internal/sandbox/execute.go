package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/redact"
)

// run executes one turn on c. reusable is false when c must not serve
// again (it died, was killed, or broke the protocol).
//
// computing is whether the turn holds a compute token; run gives it back
// for each host call and takes it again after, and clears computing when
// the turn ended (cancelled, or the pool closed) before it got it back.
func (p *Pool) run(ctx context.Context, c *child, req *agentfleet.ExecRequest, set primSet, mcpTools string, computing *bool) (res agentfleet.ExecResult, reusable bool, err error) {
	lim := p.cfg.Limits
	wall := lim.TurnTimeout
	if req.TurnTimeout > 0 && req.TurnTimeout < wall {
		wall = req.TurnTimeout
	}
	turnCtx, cancel := context.WithTimeoutCause(ctx, wall, errWallTime)
	defer cancel()
	if wall != lim.TurnTimeout {
		// The messages name the pool's limit; this turn had its agent's.
		defer func() {
			if res.Err != nil && res.Err.Kind == agentfleet.ScriptTimeout && context.Cause(turnCtx) == errWallTime {
				res.Err.Message = strings.Replace(res.Err.Message, "limit of "+shortDuration(lim.TurnTimeout),
					"limit of "+shortDuration(wall)+" (its agent's turn_timeout)", 1)
			}
		}()
	}

	// Secrets stay here: what the process reports is redacted on
	// arrival, so the process never needs them.
	red := p.redactorFor(req)
	c.seq++
	seq := c.seq
	msg := execMsg{seq: seq, prims: set, script: req.Script, args: req.Args}
	if set.has(primAPI) {
		msg.tools = moduleTable(req.OpenAPI)
	}
	msg.tools += mcpTools // the turn's MCP servers (mcpTable)
	frame := encodeExec(&c.enc, &msg)
	if len(frame) > maxFrame(lim.CarryBytes) {
		// The process would refuse the frame; say why instead.
		res.Return = []byte("null")
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptLimit, Message: fmt.Sprintf(
			"the script and its args take %s; the limit is %s", formatBytes(int64(len(frame))), formatBytes(int64(maxFrame(lim.CarryBytes))))}
		return res, true, nil
	}
	if err := c.write(frame); err != nil {
		return p.died(c, stopNone, fmt.Errorf("write request: %w", err), red, &res)
	}

	w := startWatch(c, seq, lim.CPUTime+killGrace)
	stopCancel := context.AfterFunc(turnCtx, func() {
		reason := stopCancelled
		if context.Cause(turnCtx) == errWallTime {
			reason = stopWallTime
		}
		w.cancel(reason)
	})
	defer stopCancel()

	max := maxFrame(lim.CarryBytes)
	host := hostState{red: red}
	for {
		typ, payload, err := readFrame(c.r, &c.rbuf, max)
		if err != nil {
			return p.died(c, w.finish(), err, red, &res)
		}
		switch typ {
		case frameHostCall:
			w.pause()
			if *computing { // not after a take below failed
				<-p.compute
				*computing = false
			}
			hseq, status, data := p.hostCallWithin(turnCtx, req, set, payload, &host)
			res.AIUsage, res.Wait = host.usage, host.wait
			// Without the token again, the script goes on only to be
			// stopped: its turn was cancelled or the pool is closing.
			*computing = p.take(turnCtx, p.compute) == nil
			w.resume()
			if hseq != seq {
				w.finish()
				return p.broken(c, fmt.Errorf("%w: host call for turn %d during turn %d", errProtocol, hseq, seq), red, &res)
			}
			// A failed write shows up as EOF on the next read.
			e := &c.enc
			e.start(frameHostRep)
			e.uint(seq)
			e.byte(status)
			e.bytes(data)
			_ = c.write(e.frame())
		case frameResult:
			killed := w.finish()
			m, err := decodeResult(payload)
			if err == nil && m.seq != seq {
				err = fmt.Errorf("%w: result for turn %d during turn %d", errProtocol, m.seq, seq)
			}
			if err != nil {
				return p.broken(c, err, red, &res)
			}
			c.cpuMark = m.cpu
			fillResult(&res, &m, red)
			if host.approval != nil {
				// Stopped at a call that waits for a person: the turn
				// is not over, and what the script did so far is not
				// its result.
				res = agentfleet.ExecResult{Return: []byte("null"), Logs: res.Logs, AIUsage: res.AIUsage, Approval: host.approval}
				return res, killed == stopNone, nil
			}
			if turnCtx.Err() != nil && (res.Err == nil || res.Err.Kind != agentfleet.ScriptTimeout) {
				// The turn was cancelled (or ran out of wall time) but
				// finished before the cancel reached it, typically
				// because a host call failed on the cancelled context
				// and the script went on. Whatever it produced then is
				// not a result: report the cancellation.
				reason := stopCancelled
				if context.Cause(turnCtx) == errWallTime {
					reason = stopWallTime
				}
				res.Answered, res.Answer, res.Return = false, nil, []byte("null")
				res.Err = p.stopError(reason, true)
			}
			return res, killed == stopNone, journalFailure(&res, host.journalStop)
		default:
			w.finish()
			return p.broken(c, fmt.Errorf("%w: unexpected frame %q", errProtocol, typ), red, &res)
		}
	}
}

// fillResult turns a result frame into the turn's result, redacting
// everything the process reported.
// hostCallWithin runs a host call, but stops waiting for it killGrace
// after the turn's context ends, so that a host function that ignores
// its context (a stuck client) cannot hold the turn past its wall-clock
// limit. An abandoned call finishes on its goroutine, which Close waits
// for; what it used is then not in the turn's AIUsage.
func (p *Pool) hostCallWithin(ctx context.Context, req *agentfleet.ExecRequest, set primSet, payload []byte, st *hostState) (uint64, byte, []byte) {
	type outcome struct {
		seq    uint64
		status byte
		data   []byte
		calls  hostState
	}
	call := bytes.Clone(payload) // payload aliases the read buffer
	hreq := *req                 // not req itself, which would then live on the heap for every turn
	callIndex := st.hostCalls
	st.hostCalls++
	done := make(chan outcome, 1)
	p.inflight.Add(1) // this Execute holds one: Close is not yet waiting
	// Journaled calls are numbered in the order the script makes them
	// (one at a time): the same script makes the same calls, and spawns
	// the same children, when it runs again.
	calls, stop, red := st.calls, st.journalStop, st.red
	go func() {
		defer p.inflight.Done()
		var o outcome
		o.calls.calls, o.calls.journalStop, o.calls.hostCalls, o.calls.red = calls, stop, callIndex, red
		o.seq, o.status, o.data = p.hostCall(ctx, &hreq, set, call, &o.calls)
		done <- o
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		grace := time.NewTimer(killGrace)
		defer grace.Stop()
		select {
		case o = <-done:
		case <-grace.C:
			d := decoder{b: call}
			return d.uint(), hostError, []byte("the turn was stopped while this call was still running")
		}
	}
	st.usage = st.usage.Add(o.calls.usage)
	st.calls, st.journalStop = o.calls.calls, o.calls.journalStop
	if o.calls.approval != nil {
		st.approval = o.calls.approval
	}
	if w := o.calls.wait; w != nil {
		if st.wait == nil {
			st.wait = &agentfleet.WaitRequest{}
		}
		st.wait.IDs = appendNew(st.wait.IDs, w.IDs...)
		st.wait.Timeout = max(st.wait.Timeout, w.Timeout)
	}
	return o.seq, o.status, o.data
}

func fillResult(res *agentfleet.ExecResult, m *resultMsg, red *redactor) {
	res.Answered = m.answered
	if m.answered {
		res.Answer = redact.ShapesJSON(red.json(m.answer))
	}
	res.Return = red.json(m.ret)
	if len(res.Return) == 0 {
		res.Return = []byte("null")
	}
	res.Logs = red.logs(m.logHead, m.logTail, m.logCut)
	if m.errKind != 0 {
		res.Err = &agentfleet.ScriptError{Kind: kindFromCode(m.errKind), Message: red.message(m.errMsg, m.errCut)}
	}
}

// broken discards a child that broke the protocol.
func (p *Pool) broken(c *child, err error, red *redactor, res *agentfleet.ExecResult) (agentfleet.ExecResult, bool, error) {
	c.kill()
	return p.died(c, stopNone, err, red, res)
}

// died reports a turn whose process is gone: killed by us (killed says
// why), out of memory, or crashed. The process is reaped here. Its
// stderr, logged, is redacted with red: a crash report can quote the
// script's data.
func (p *Pool) died(c *child, killed stopReason, cause error, red *redactor, res *agentfleet.ExecResult) (agentfleet.ExecResult, bool, error) {
	byParent := c.killed.Load() // before the kill below, which only makes sure
	c.kill()
	c.wait()
	if p.isClosed() {
		return *res, false, ErrClosed
	}
	res.Return = []byte("null")
	stderr := strings.TrimSpace(c.stderr.String())
	exit := exitDescription(c.waitErr)
	switch {
	case killed != stopNone:
		res.Err = p.stopError(killed, false)
	case oomExit(c.waitErr, stderr, byParent):
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptMemory, Message: fmt.Sprintf(
			"the script exceeded the memory limit of %s (an allocation too large to satisfy) and its sandbox process was terminated; hold less data at once",
			formatBytes(p.cfg.Limits.MemoryBytes))}
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptLimit, Message: "the script recursed too deeply and its sandbox process was terminated; use a loop instead of deep recursion"}
	default:
		res.Err = &agentfleet.ScriptError{Kind: agentfleet.ScriptException, Message: fmt.Sprintf("sandbox process crashed (%s); the turn did not complete", exit)}
	}
	p.cfg.Logger.Warn("sandbox process ended during a turn",
		"pid", c.cmd.Process.Pid, "kind", res.Err.Kind, "exit", exit, "cause", cause, "stderr", red.str(firstLines(stderr, 12)))
	return *res, false, nil
}

// stopError is the error of a turn the parent stopped. cooperative is
// false when the process had to be killed because it did not stop.
func (p *Pool) stopError(r stopReason, cooperative bool) *agentfleet.ScriptError {
	l := p.cfg.Limits
	switch r {
	case stopCancelled:
		return &agentfleet.ScriptError{Kind: agentfleet.ScriptCancelled, Message: "the execution was cancelled"}
	case stopWallTime:
		return &agentfleet.ScriptError{Kind: agentfleet.ScriptTimeout, Message: fmt.Sprintf("the turn exceeded its wall-clock time limit of %s (including fetch and ai calls) and was stopped", shortDuration(l.TurnTimeout))}
	}
	msg := fmt.Sprintf("the script used its CPU time limit of %s and was stopped", shortDuration(l.CPUTime))
	if !cooperative {
		msg = fmt.Sprintf("the script did not stop at its CPU time limit of %s (stuck in a long built-in call, such as sorting or filling a huge array) and its sandbox process was killed", shortDuration(l.CPUTime))
	}
	return &agentfleet.ScriptError{Kind: agentfleet.ScriptTimeout, Message: msg}
}

// hostState is what one execution's host calls add up to: the usage of
// its ai() calls, how many host calls it made (hostCalls: Call.Index)
// and how many of them were journaled (calls), why its journal stopped
// (nil while it works), what it waits for (children, or the approval
// that stopped it).
type hostState struct {
	usage       agentfleet.Usage
	hostCalls   int
	calls       int
	journalStop error
	wait        *agentfleet.WaitRequest
	approval    *agentfleet.ApprovalCall
	// red is the turn's redactor (read only).
	red *redactor
	// apis are the turn's compiled OpenAPI modules by name, looked up
	// once per turn rather than hashed again per call.
	apis map[string]*apiModule
}

// appendNew appends the ids not in have yet.
func appendNew(have []string, ids ...string) []string {
	for _, id := range ids {
		if !slices.Contains(have, id) {
			have = append(have, id)
		}
	}
	return have
}
