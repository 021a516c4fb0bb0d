package loop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/loop"
)

// carry200Replies is a run of 6 model calls that carries a 200-item list
// from turn to turn and answers on the sixth.
var carry200Replies = []string{
	js(`function run(args) {
  var out = [];
  for (var i = 0; i < 200; i++) {
    out.push({id: i, name: "item " + i, price: i * 1.25, tags: ["a", "b"]});
  }
  log("made " + out.length + " items");
  return out;
}`),
	js(`function run(args) {
  var out = args.map(function (it) {
    return {id: it.id, name: it.name, price: Math.round(it.price * 1.2 * 100) / 100, tags: it.tags};
  });
  log("repriced " + out.length + "; first " + out[0].price + ", last " + out[out.length - 1].price);
  return out;
}`),
	js(`function run(args) {
  var out = args.map(function (it) {
    var band = it.price < 50 ? "low" : it.price < 150 ? "mid" : "high";
    return {id: it.id, name: it.name, price: it.price, tags: it.tags.concat([band])};
  });
  log("banded " + out.length);
  return out;
}`),
	js(`function run(args) {
  var out = args.slice().sort(function (a, b) { return b.price - a.price; });
  log("top: " + out[0].name + " at " + out[0].price);
  return out;
}`),
	js(`function run(args) {
  var total = 0;
  for (var i = 0; i < args.length; i++) total += args[i].price;
  log("total " + total.toFixed(2) + " over " + args.length);
  return {items: args, total: total};
}`),
	js(`function run(args) {
  answer({count: args.items.length, total: args.total, top: args.items[0].name});
}`),
}

// driveCarry200 drives the 6-call run and returns the prompts the model
// received.
func driveCarry200(t *testing.T) [][]agentfleet.ChatMessage {
	t.Helper()
	replies := make([]llm.Reply, len(carry200Replies))
	for i, r := range carry200Replies {
		replies[i] = llm.Reply{Content: r}
	}
	b := setup(t, replies...)
	agent := agentfleet.Agent{AgentSpec: agentfleet.AgentSpec{Persona: "You are a careful general-purpose agent. Work in small steps, check intermediate results with log(), and answer plainly."}}
	out := b.drive(t, agentfleet.Run{Message: "Make 200 priced items, reprice them, band them, sort them and report the total."}, agent)
	require.Equal(t, agentfleet.StatusCompleted, out.run.Status, out.run.Error)
	var prompts [][]agentfleet.ChatMessage
	for _, r := range b.model.Requests() {
		prompts = append(prompts, r.Messages)
	}
	require.Len(t, prompts, 6)
	return prompts
}

// The prompt characters of a 6-call run carrying 200 items, and how much
// of each call's prompt the next call repeats as its prefix (what a
// provider's prompt cache can reuse).
func TestPromptSizeAndPrefixOfACarry200Run(t *testing.T) {
	t.Parallel()
	st := loop.MeasurePrompts(driveCarry200(t))
	t.Logf("prompt chars per call %v, total %d; prefix shares %.3f (min %.3f)", st.Chars, st.TotalChars, st.PrefixShares, st.MinPrefixShare)
	require.LessOrEqual(t, st.TotalChars, 15500)
	require.GreaterOrEqual(t, st.MinPrefixShare, 0.90)
}

func TestMeasurePrompts(t *testing.T) {
	t.Parallel()
	sys := agentfleet.ChatMessage{Role: agentfleet.RoleSystem, Content: "0123456789"}
	task := agentfleet.ChatMessage{Role: agentfleet.RoleUser, Content: "abcdefghij"}
	a := []agentfleet.ChatMessage{sys, task}
	grown := []agentfleet.ChatMessage{sys, task, {Role: agentfleet.RoleAssistant, Content: "xyz"}}
	changed := []agentfleet.ChatMessage{sys, {Role: agentfleet.RoleUser, Content: "abcdeXXXXX"}, {Role: agentfleet.RoleAssistant, Content: "xyz"}}
	st := loop.MeasurePrompts([][]agentfleet.ChatMessage{a, grown, changed})
	require.Equal(t, []int{20, 23, 23}, st.Chars)
	require.Equal(t, 66, st.TotalChars)
	require.InDelta(t, 1.0, st.PrefixShares[0], 1e-9, "a prompt that only grows keeps all of the last as its prefix")
	require.InDelta(t, 15.0/23, st.PrefixShares[1], 1e-9, "a changed message ends the prefix where it differs")
	require.InDelta(t, 15.0/23, st.MinPrefixShare, 1e-9)
	other := []agentfleet.ChatMessage{{Role: agentfleet.RoleUser, Content: "0123456789"}}
	require.Zero(t, loop.MeasurePrompts([][]agentfleet.ChatMessage{a, other}).MinPrefixShare, "another role is another prompt")
}
