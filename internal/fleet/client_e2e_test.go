package fleet_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// cutProxy is a TCP proxy in front of the dispatcher whose connections a
// test cuts, as a load balancer restarting or a flaky network would,
// while the client reads an event stream through it.
type cutProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Add(2)
		go pipe(up, down)
		go pipe(down, up)
	}
}

// cut closes every connection open through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// setupCutFleet is a fleet whose model takes 200ms a call, so a run's
// turns come apart, and a client of the tenant that reaches the
// dispatcher through a proxy the test cuts.
func setupCutFleet(t *testing.T) (*testFleet, *cutProxy, *client.Client) {
	t.Helper()
	f := setupFleet(t, threeTurns, 200*time.Millisecond)
	proxy := startCutProxy(t, strings.TrimPrefix(f.dispatcher.URL(), "http://"))
	return f, proxy, apiClient(t, proxy.URL(), f.tenantKey)
}

// TestClientRunEventsResumeAfterACutConnection: a run's events followed
// with client.RunEvents through a proxy whose connections are cut twice
// while the run goes on arrive exactly as the store has them, each once,
// in order, the iteration ending after done.
func TestClientRunEventsResumeAfterACutConnection(t *testing.T) {
	t.Parallel()
	f, proxy, c := setupCutFleet(t)
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()

	run := f.submit(wire.RunCreateRequest{Message: "compute 4"})
	var got []agentfleet.Event
	cuts := 0
	for ev, err := range c.RunEvents(ctx, run.ID, 0) {
		require.NoError(t, err)
		if ev.Type == agentfleet.EventResponseChunk {
			continue // streamed pieces of a reply, not stored
		}
		got = append(got, ev)
		// A turn's events come together; the next turn's come after a
		// model call. Cut between them, so what follows the cut is not
		// already in the client's buffer.
		if ev.Type == agentfleet.EventDataUpdate {
			cuts++
			proxy.cut()
		}
	}
	require.Equal(t, 2, cuts, "two turns carried data, and a cut followed each")
	require.NotEmpty(t, got)
	require.Equal(t, agentfleet.EventDone, got[len(got)-1].Type)
	require.Equal(t, f.events(run.ID), got, "every stored event, once, in order")
	require.GreaterOrEqual(t, proxy.accepted.Load(), int64(3), "the stream was resumed after each cut")
	ended, err := c.GetRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, agentfleet.StatusCompleted, ended.Status)
}

// TestClientAllEventsResumeAfterACutConnection: the tenant's stream
// followed with client.AllEvents through a proxy cut twice while three
// runs go on brings every event of every run once, each run's in seq
// order, positions increasing.
func TestClientAllEventsResumeAfterACutConnection(t *testing.T) {
	t.Parallel()
	f, proxy, c := setupCutFleet(t)
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()

	var runs []agentfleet.Run
	for i := range 3 {
		runs = append(runs, f.submit(wire.RunCreateRequest{Message: fmt.Sprintf("compute %d", i)}))
	}
	got := map[string][]int64{}
	var lastPos uint64
	cuts, ended := 0, 0
	for ev, err := range c.AllEvents(ctx, client.TenantEventsParams{FromOldest: true}) {
		require.NoError(t, err)
		require.Greater(t, ev.Pos, lastPos, "positions increase")
		lastPos = ev.Pos
		got[ev.Event.RunID] = append(got[ev.Event.RunID], ev.Event.Seq)
		// Cut at the end of a turn's burst of the first run's events:
		// its next turn is a model call away, not yet in the client's
		// buffer.
		if ev.Event.RunID == runs[0].ID && ev.Event.Type == agentfleet.EventDataUpdate {
			cuts++
			proxy.cut()
		}
		if ev.Event.Terminal() {
			if ended++; ended == len(runs) {
				break
			}
		}
	}
	require.Equal(t, len(runs), ended)
	require.Equal(t, 2, cuts, "two of the first run's turns carried data, and a cut followed each")
	require.GreaterOrEqual(t, proxy.accepted.Load(), int64(3), "the stream was resumed after each cut")
	require.Len(t, got, len(runs))
	for _, r := range runs {
		var want []int64
		for _, ev := range f.events(r.ID) {
			want = append(want, ev.Seq)
		}
		require.Equal(t, want, got[r.ID], "run %s: every event once, in order", r.ID)
	}
}
