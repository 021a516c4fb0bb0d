package fleet_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/llm"
	"github.com/agentfleet/agentfleet/internal/llm/fakeserver"
	"github.com/agentfleet/agentfleet/wire"
)

const streamSecret = "tok-STREAMED-9f8e7d6c5b4a"

// streamedChunk is a response chunk and when a subscriber got it.
type streamedChunk struct {
	ev agentfleet.Event
	at time.Time
}

// chunkLog collects the chunks a subscriber got.
type chunkLog struct {
	mu     sync.Mutex
	chunks []streamedChunk
}

func (l *chunkLog) add(ev agentfleet.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = append(l.chunks, streamedChunk{ev, time.Now()})
}

func (l *chunkLog) all() []streamedChunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]streamedChunk(nil), l.chunks...)
}

// requireChunksOf checks the chunks of a one-turn run: indexed from 1,
// the first one before the model sent its last piece, none holding four
// bytes in a row of the secret, and joined, the recorded reply.
func requireChunksOf(t *testing.T, where string, chunks []streamedChunk, runID, reply string, lastSent time.Time) {
	t.Helper()
	require.NotEmpty(t, chunks, where)
	require.Greater(t, len(chunks), 3, "%s: the reply came in pieces", where)
	require.True(t, chunks[0].at.Before(lastSent), "%s: the first chunk arrived %s after the model's last piece left", where, chunks[0].at.Sub(lastSent))
	var joined strings.Builder
	for i, c := range chunks {
		require.Equal(t, agentfleet.EventResponseChunk, c.ev.Type, where)
		require.Equal(t, runID, c.ev.RunID, where)
		require.Equal(t, "acme", c.ev.Tenant, where)
		require.Equal(t, 1, c.ev.Turn, where)
		require.Equal(t, i+1, c.ev.Index, where)
		require.Zero(t, c.ev.Seq, where)
		for j := 0; j+4 <= len(streamSecret); j++ {
			require.NotContains(t, c.ev.Text, streamSecret[j:j+4], "%s: chunk %d %q carries part of the secret", where, c.ev.Index, c.ev.Text)
		}
		joined.WriteString(c.ev.Text)
	}
	require.Equal(t, reply, joined.String(), where)
}

// A run's model reply streams to an SSE client and to a NATS subscriber
// with the tenant's creds while the model is still sending it; the
// chunks join into the recorded reply, and a tenant secret the model
// says, split across two of its pieces, reaches no chunk even in part.
// Another tenant's creds cannot subscribe to the run's chunks.
func TestFleetStreamsTheReplyToSSEAndTenantNATS(t *testing.T) {
	reply := "Here is what I found. The token you gave me is " + streamSecret + ", and it works; nothing more to do."
	var lastSent atomic.Int64
	model, err := fakeserver.Start(fakeserver.Config{
		Responder: fakeserver.Static(reply, agentfleet.Usage{PromptTokens: 50, CompletionTokens: 30}),
		// The first piece leaves after the subscribers are in place; the
		// rest at a slow model's pace, 7 bytes apart so the secret is cut.
		Latency: 300 * time.Millisecond, ChunkDelay: 25 * time.Millisecond, ChunkSize: 7,
		OnChunk: func(_ fakeserver.Request, _ int, _ string) { lastSent.Store(time.Now().UnixNano()) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })
	f := setupAuthFleet(t, false, func(c *fleet.Config) {
		c.Model = llm.Config{Model: "fake-model", BaseURL: model.URL()}
		c.SecretsKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme := client.New(f.dev.URL(), f.keys["acme"])
	_, err = acme.PutSecret(ctx, "", "api_token", wire.SecretRequest{Value: streamSecret, Hosts: []string{"api.example.com"}})
	require.NoError(t, err)

	// The tenant's own subscriber, on core NATS with its creds.
	nc, _ := f.tenantConn(t, f.creds(t, "acme", time.Hour), "acme")
	var onNATS chunkLog
	sub, err := nc.Subscribe("af.stream.acme.>", func(m *nats.Msg) {
		var ev agentfleet.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			onNATS.add(ev)
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())
	// Another tenant's creds may not read acme's chunks.
	other, otherErrs := f.tenantConn(t, f.creds(t, "globex", time.Hour), "globex")
	_, err = other.Subscribe("af.stream.acme.>", func(*nats.Msg) { t.Error("globex got a chunk of acme's") })
	require.NoError(t, err)
	require.NoError(t, other.Flush())
	requirePermissionError(t, otherErrs, "af.stream.acme.>")

	run, err := acme.CreateRun(ctx, wire.RunCreateRequest{Message: "check the token"})
	require.NoError(t, err)
	var onSSE chunkLog
	var stored []agentfleet.Event
	require.NoError(t, acme.Events(ctx, run.ID, 0, func(ev agentfleet.Event) error {
		if ev.Type == agentfleet.EventResponseChunk {
			onSSE.add(ev)
		} else {
			stored = append(stored, ev)
		}
		return nil
	}))
	run, err = acme.Wait(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, run.Status)

	var recorded string
	for _, ev := range stored {
		require.NotEqual(t, agentfleet.EventResponseChunk, ev.Type)
		if ev.Type == agentfleet.EventModelCall {
			recorded = ev.Content
		}
	}
	require.Equal(t, strings.Replace(reply, streamSecret, "[secret:api_token]", 1), recorded)
	sent := time.Unix(0, lastSent.Load())
	requireChunksOf(t, "SSE", onSSE.all(), run.ID, recorded, sent)
	require.Eventually(t, func() bool { return len(onNATS.all()) == len(onSSE.all()) }, 5*time.Second, 10*time.Millisecond)
	requireChunksOf(t, "NATS", onNATS.all(), run.ID, recorded, sent)
	require.Equal(t, 1, model.Completions(), "one model call")
}

// A stream that breaks midway is asked for again as a plain call: the
// reply is recorded once, the turn charged once (the plain call's usage;
// the broken attempt is not charged), a warning says so, and the chunks
// start over at index 1 with the whole reply.
func TestFleetRetriesABrokenStreamAsAPlainCallBilledOnce(t *testing.T) {
	reply := "A reply long enough to come in several pieces of sixteen bytes, of which the stream delivers only three."
	usage := agentfleet.Usage{PromptTokens: 70, CompletionTokens: 25}
	f := setupFleetWith(t, fleetOptions{responder: fakeserver.Static(reply, usage), workers: 1, latency: 200 * time.Millisecond})
	f.model.Inject(fakeserver.Fault{BreakAfter: 3})
	run := f.submit(wire.RunCreateRequest{Message: "break the stream"})
	var chunks []agentfleet.Event
	require.NoError(t, f.tenant.Events(f.ctx, run.ID, 0, func(ev agentfleet.Event) error {
		if ev.Type == agentfleet.EventResponseChunk {
			chunks = append(chunks, ev)
		}
		return nil
	}))
	run = f.wait(run.ID, 30*time.Second)
	require.Equal(t, agentfleet.StatusCompleted, run.Status)
	require.Equal(t, usage, run.Usage, "the run is charged the plain call alone")

	got := f.model.Received()
	require.Len(t, got, 2)
	require.True(t, got[0].Stream)
	require.False(t, got[1].Stream, "the retry is a plain call")

	evs := f.events(run.ID)
	var calls, warnings int
	for _, ev := range evs {
		switch ev.Type {
		case agentfleet.EventModelCall:
			calls++
			require.Equal(t, reply, ev.Content)
			require.Equal(t, &agentfleet.Tokens{Prompt: usage.PromptTokens, Completion: usage.CompletionTokens}, ev.Tokens)
		case agentfleet.EventWarning:
			warnings++
			require.Contains(t, ev.Content, "stream broke")
		}
	}
	require.Equal(t, 1, calls, "the reply is recorded once")
	require.Equal(t, 1, warnings)

	report, err := f.admin.Usage(f.ctx, "acme", "run")
	require.NoError(t, err)
	require.Len(t, report.Rows, 1)
	require.Equal(t, usage, report.Rows[0].Usage, "the tenant is billed once")

	// The chunks: what came of the three pieces (the first at once; the
	// others, which came within the fleet's coalescing window, went out
	// joined or were dropped with the broken stream), then the reply
	// whole as chunk 1 again.
	require.GreaterOrEqual(t, len(chunks), 2)
	last := chunks[len(chunks)-1]
	require.Equal(t, 1, last.Index)
	require.Equal(t, reply, last.Text)
	var came strings.Builder
	for i, c := range chunks[:len(chunks)-1] {
		require.Equal(t, i+1, c.Index)
		came.WriteString(c.Text)
	}
	require.NotEmpty(t, came.String())
	require.True(t, strings.HasPrefix(reply[:48], came.String()), "the chunks before the break are the start of the reply: %q", came.String())
}

// The console's run page types a streaming reply into its turn as the
// chunks arrive, and the turn's model reply replaces it once recorded.
func TestConsoleTypesAStreamingReply(t *testing.T) {
	br := browsertest.Start(t)
	reply := "Typing this reply slowly, a piece at a time, so the page shows it before the turn ends."
	model, err := fakeserver.Start(fakeserver.Config{
		Responder: fakeserver.Static(reply, agentfleet.Usage{PromptTokens: 40, CompletionTokens: 20}),
		// Time to open the page first; then about two seconds of typing.
		Latency: 2 * time.Second, ChunkDelay: 150 * time.Millisecond, ChunkSize: 8,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = model.Close() })
	f := setupAuthFleet(t, false, func(c *fleet.Config) { c.Model = llm.Config{Model: "fake-model", BaseURL: model.URL()} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acme := client.New(f.dev.URL(), f.keys["acme"])
	run, err := acme.CreateRun(ctx, wire.RunCreateRequest{Message: "type slowly"})
	require.NoError(t, err)

	p := signIn(t, br, f.dev.URL(), f.keys["acme"])
	p.Navigate(f.dev.URL() + "/#/runs/" + run.ID)
	const typing = `section.turn[data-turn="1"] .block.call.streaming pre`
	p.WaitJS("part of the reply typed", `(document.querySelector('`+typing+`')?.textContent || '').length >= 16`)
	typed := p.Text(typing)
	require.True(t, strings.HasPrefix(reply, typed), "typed %q", typed)
	require.Less(t, len(typed), len(reply), "typed before the reply was whole")
	require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('section.turn[data-turn="1"] .block.answer').length`), "no answer yet")

	p.WaitVisible(`section.turn[data-turn="1"] .block.answer`)
	require.Zero(t, browsertest.Eval[int](p, `document.querySelectorAll('.block.call.streaming').length`), "the recorded reply replaced the typed one")
	require.Contains(t, p.Text(`section.turn[data-turn="1"] .block.call`), "Typing this reply slowly")
	requireClean(t, p)
}
