package loop

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// Script is the code block found in a model reply.
type Script struct {
	Code string
	// Unterminated is set when the fence was never closed (the reply was
	// cut, usually by max_tokens); the code is everything after the fence.
	Unterminated bool
	// start and end are the byte offsets of the whole fenced block,
	// fences included, so it can be elided from history later.
	start, end int
}

// ExtractScript finds the script of a reply: the first fenced block tagged
// javascript or js (any case), or an untagged block that defines run().
// ok is false when the reply has no such block: the reply is then the
// run's final answer.
func ExtractScript(reply string) (s Script, ok bool) {
	pos := 0
	for pos < len(reply) {
		lineEnd := strings.IndexByte(reply[pos:], '\n')
		next := len(reply)
		if lineEnd >= 0 {
			next = pos + lineEnd + 1
		}
		line := strings.TrimRight(reply[pos:next], "\r\n")
		if tag, isFence := openingFence(line); isFence {
			codeStart := next
			code, end, closed := readFenced(reply, codeStart)
			if tag == "javascript" || tag == "js" || (tag == "" && definesRun(code)) {
				return Script{Code: code, Unterminated: !closed, start: pos, end: end}, true
			}
			pos = end
			continue
		}
		pos = next
	}
	return Script{}, false
}

// openingFence reports whether line opens a fenced code block and returns
// its language tag, lower-cased.
func openingFence(line string) (tag string, ok bool) {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 || !strings.HasPrefix(trimmed, "```") {
		return "", false
	}
	info := strings.TrimSpace(strings.TrimLeft(trimmed, "`"))
	if f := strings.Fields(info); len(f) > 0 {
		info = f[0]
	}
	return strings.ToLower(info), true
}

// readFenced reads a block body starting at from up to its closing fence.
// end is the offset just past the closing fence line.
func readFenced(reply string, from int) (code string, end int, closed bool) {
	pos := from
	for pos < len(reply) {
		lineEnd := strings.IndexByte(reply[pos:], '\n')
		next := len(reply)
		if lineEnd >= 0 {
			next = pos + lineEnd + 1
		}
		line := strings.TrimSpace(reply[pos:next])
		if strings.HasPrefix(line, "```") && strings.Trim(line, "`") == "" {
			return reply[from:pos], next, true
		}
		pos = next
	}
	return reply[from:], len(reply), false
}

func definesRun(code string) bool {
	return strings.Contains(code, "function run") || strings.Contains(code, "run =")
}

// ElideScript replaces the script block of an earlier turn's reply with a
// short marker, keeping the prose around it. Only the latest script of a
// run stays verbatim in the history: older ones cost tokens and their
// effect is already in the results that follow them.
func ElideScript(reply string, turn int) string {
	s, ok := ExtractScript(reply)
	if !ok {
		return reply
	}
	return elide(reply, s, turn)
}

// elide is ElideScript for the script s found in reply.
func elide(reply string, s Script, turn int) string {
	prefix, suffix := reply[:s.start], reply[s.end:]
	var b strings.Builder
	b.Grow(len(prefix) + len(suffix) + 40)
	b.WriteString(prefix)
	if prefix != "" && !strings.HasSuffix(prefix, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString("[script of turn ")
	b.WriteString(strconv.Itoa(turn))
	b.WriteString(" elided]")
	if suffix != "" && !strings.HasPrefix(suffix, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(suffix)
	return b.String()
}

// Observation is what the model is told about a turn's execution: its log
// output and the digest of what run() returned, or the error and the
// digest of the args that remain in place. Values never appear here. It
// is written once, with the turn, and replayed unchanged by every later
// prompt, so it is kept short.
func Observation(turn int, res agentfleet.ExecResult, carried string, carriedBytes int) string {
	var b strings.Builder
	if res.Err != nil {
		fmt.Fprintf(&b, "Turn %d failed (%s): %s\n", turn, res.Err.Kind, res.Err.Message)
	} else if res.Answered {
		fmt.Fprintf(&b, "Turn %d answered.\n", turn)
	} else {
		fmt.Fprintf(&b, "Turn %d ran.\n", turn)
	}
	if res.Logs != "" {
		b.WriteString(observationLog)
		b.WriteString(strings.TrimRight(res.Logs, "\n"))
		b.WriteByte('\n')
	}
	if res.Answered {
		return b.String()
	}
	if res.Err != nil {
		fmt.Fprintf(&b, "%s%s\n", observationUnchanged, carried)
		return b.String()
	}
	fmt.Fprintf(&b, "%s%s (%s)\n", observationReturned, carried, byteSize(carriedBytes))
	return b.String()
}

// The parts of an observation that observationLogs takes apart. The
// older wordings are those of observations stored before these.
const (
	observationLog       = "log:\n"
	observationReturned  = "returned "
	observationUnchanged = "args unchanged: "
	observationWaits     = "the run now waits for "
)

var observationTails = []string{observationReturned, observationUnchanged, "args unchanged for the next turn: "}

// observationLogs returns the log lines of an observation, without its
// head line and the lines that follow the log.
func observationLogs(obs string) string {
	_, rest, ok := strings.Cut(obs, "\n")
	if !ok {
		return ""
	}
	rest, ok = strings.CutPrefix(rest, observationLog)
	if !ok {
		return "" // no log, or the older "log: (empty)"
	}
	lines := strings.Split(strings.TrimRight(rest, "\n"), "\n")
	// The tail: at most what returned (or stayed) and the wait.
	if n := len(lines); n > 0 && strings.HasPrefix(lines[n-1], observationWaits) {
		lines = lines[:n-1]
	}
	if n := len(lines); n > 0 && hasAnyPrefix(lines[n-1], observationTails) {
		lines = lines[:n-1]
	}
	return strings.Join(lines, "\n")
}

// observationFailed reports whether an observation reports a failed turn.
func observationFailed(obs string, turn int) bool {
	rest, ok := strings.CutPrefix(obs, "Turn ")
	if !ok {
		return false
	}
	var buf [20]byte
	rest, ok = strings.CutPrefix(rest, string(strconv.AppendInt(buf[:0], int64(turn), 10)))
	return ok && strings.HasPrefix(rest, " failed (")
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func byteSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
	}
}

// ChildResults is what a parent's turn gets for the children it waited
// for, in the order of ids, from the runs as they are now: an unfinished
// child reports running, an id that is none of parent's children says
// so, and an answer longer than agentfleet.ChildAnswerMaxBytes is cut to
// a string of that many bytes and marked truncated.
func ChildResults(parent string, ids []string, runs []agentfleet.Run) []agentfleet.ChildResult {
	byID := make(map[string]*agentfleet.Run, len(runs))
	for i := range runs {
		byID[runs[i].ID] = &runs[i]
	}
	out := make([]agentfleet.ChildResult, len(ids))
	for i, id := range ids {
		r := byID[id]
		switch {
		case r == nil || r.ParentRunID != parent:
			out[i] = agentfleet.ChildResult{ID: id, Status: "unknown", Error: "not a child run of this run"}
			continue
		case !r.Status.Terminal():
			out[i] = agentfleet.ChildResult{ID: id, Status: agentfleet.StatusRunning}
			continue
		}
		c := agentfleet.ChildResult{ID: id, Status: r.Status, Answer: r.Answer, Error: r.Error}
		if len(c.Answer) > agentfleet.ChildAnswerMaxBytes {
			// A string answer keeps its first bytes; any other value
			// its JSON text's, as a string.
			text := string(c.Answer)
			var s string
			if json.Unmarshal(c.Answer, &s) == nil {
				text = s
			}
			if len(text) > agentfleet.ChildAnswerMaxBytes {
				text = strings.ToValidUTF8(text[:agentfleet.ChildAnswerMaxBytes], "")
			}
			c.Answer, _ = json.Marshal(text)
			c.Truncated = true
		}
		out[i] = c
	}
	return out
}

// WithChildren is the args of the turn after a wait: the value the
// script returned with "children" set to the results, or, when it
// returned something other than an object, {"value": it, "children"}.
func WithChildren(args json.RawMessage, children []agentfleet.ChildResult) json.RawMessage {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		obj = map[string]json.RawMessage{"value": args}
	}
	kids, err := json.Marshal(children)
	if err != nil {
		return args
	}
	obj["children"] = kids
	out, err := json.Marshal(obj)
	if err != nil {
		return args
	}
	return out
}
