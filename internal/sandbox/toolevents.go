// tool_call and tool_result events of the calls of OpenAPI modules: what
// the call sent and what came back, redacted and cut, for the run's
// events (the caller stamps and publishes them, ExecRequest.ToolEvent).

package sandbox

import (
	"encoding/json"
	"strconv"

	"github.com/agentfleet/agentfleet"
)

// ToolEventBodyMaxBytes bounds the body a tool event carries, so that
// the event stays within the run's event cap.
const ToolEventBodyMaxBytes = 4 << 10

// toolEventArgs is a tool event's Args.
type toolEventArgs struct {
	Tool      string `json:"tool"`
	Method    string `json:"method,omitempty"`
	URL       string `json:"url,omitempty"`
	Status    int    `json:"status,omitempty"`
	Body      string `json:"body,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
	Replayed  bool   `json:"replayed,omitempty"`
}

func cutBody(red *redactor, s string) (string, bool) {
	s = red.str(s)
	if len(s) <= ToolEventBodyMaxBytes {
		return s, false
	}
	return string(trimPartialRune([]byte(s[:ToolEventBodyMaxBytes]))), true
}

// toolCallEvent tells of a call about to be sent (args canonical fetch
// arguments, without the credentials, which are set at send time).
func toolCallEvent(req *agentfleet.ExecRequest, red *redactor, tool string, args []byte) {
	if req.ToolEvent == nil {
		return
	}
	var a fetchArgs
	_ = json.Unmarshal(args, &a)
	ev := toolEventArgs{Tool: tool, Method: a.Method, URL: red.str(a.URL)}
	if a.Body != nil {
		ev.Body, ev.Truncated = cutBody(red, *a.Body)
	}
	doc, _ := json.Marshal(ev)
	req.ToolEvent(agentfleet.Event{Type: agentfleet.EventToolCall, Summary: tool + " " + ev.Method + " " + ev.URL, Args: doc})
}

// toolResultEvent tells of a call's outcome: its response (status and
// body) or its error.
func toolResultEvent(req *agentfleet.ExecRequest, red *redactor, tool string, status byte, data []byte, replayed bool) {
	if req.ToolEvent == nil {
		return
	}
	ev := toolEventArgs{Tool: tool, Replayed: replayed}
	summary := tool
	if status == hostOK {
		var r fetchResult
		_ = json.Unmarshal(data, &r)
		ev.Status = r.Status
		ev.Body, ev.Truncated = cutBody(red, r.Body)
		ev.Truncated = ev.Truncated || r.Truncated
		summary += " " + strconv.Itoa(r.Status)
	} else {
		ev.Error, _ = cutBody(red, string(data))
		summary += failedOrDenied(status)
	}
	if replayed {
		summary += " (replayed from the journal)"
	}
	doc, _ := json.Marshal(ev)
	req.ToolEvent(agentfleet.Event{Type: agentfleet.EventToolResult, Summary: summary, Args: doc})
}

// failedOrDenied ends a tool_result's summary for a call that threw: a
// refusal (policy, approval) reads "denied".
func failedOrDenied(status byte) string {
	if status == hostDenied {
		return " denied"
	}
	return " failed"
}

// toolEvents tells of a call not made: replayed by the journal, or
// refused by the policy or an approval. Both events, so the run's turn
// shows it whichever attempt ran.
func toolEvents(req *agentfleet.ExecRequest, red *redactor, tool string, args []byte, status byte, data []byte, replayed bool) {
	toolCallEvent(req, red, tool, args)
	toolResultEvent(req, red, tool, status, data, replayed)
}
