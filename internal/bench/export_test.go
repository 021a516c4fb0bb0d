package bench

import (
	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
)

// Summarize is summarize, for the table test of percentiles.
var Summarize = summarize

// PrefixFractions is prefixFractions, for its table test.
var PrefixFractions = prefixFractions

// ScriptedReply is the fake model's reply to a session message's or the
// carry run's request, and whether it was one.
func ScriptedReply(msgs []agentfleet.ChatMessage) (string, bool) { return (&model{}).scripted(msgs) }

// Serve is the fake model's reply to one request while recording, and
// whether it recorded the request as a summary call.
func Serve(msgs []agentfleet.ChatMessage) (reply string, summary bool) {
	m := &model{}
	m.setRecording(true)
	reply, _, _ = m.respond(fakeserver.Request{Messages: msgs})
	rec := m.takeRecorded()
	return reply, len(rec) == 1 && rec[0].summary
}
