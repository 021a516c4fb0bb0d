package bench

import "github.com/agentfleet/agentfleet"

// Summarize is summarize, for the table test of percentiles.
var Summarize = summarize

// PrefixFractions is prefixFractions, for its table test.
var PrefixFractions = prefixFractions

// ScriptedReply is the fake model's reply to a session message's or the
// carry run's request, and whether it was one.
func ScriptedReply(msgs []agentfleet.ChatMessage) (string, bool) { return (&model{}).scripted(msgs) }
