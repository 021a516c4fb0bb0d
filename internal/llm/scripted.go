package llm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet"
)

// ErrUnexpectedCall is returned by Scripted for a call it has no reply
// for. AssertDone reports every such call, so a test fails even when the
// code under test swallowed the error.
var ErrUnexpectedCall = errors.New("llm.Scripted: unexpected model call")

// ScriptedModel is the model name Scripted replies carry by default.
const ScriptedModel = "scripted"

// Reply is one scripted model reply.
type Reply struct {
	// Content is the reply text.
	Content string
	// Usage is reported as given; zero means estimated from the
	// request and Content (and still reported).
	Usage agentfleet.Usage
	// Unreported makes the reply look like a provider that sent no
	// usage: Usage is estimated and UsageReported is false.
	Unreported bool
	// Model names the model in the response; empty means ScriptedModel.
	Model string
	// Err, when set, is returned instead of a reply.
	Err error
	// Check, when set, inspects the request first. An error from it
	// fails the call and is reported by AssertDone; it is a plain error
	// rather than a t.Fatal because the call may run on a goroutine the
	// test does not own.
	Check func(agentfleet.ModelRequest) error
}

// TB is the part of testing.TB that AssertDone needs; the interface keeps
// the testing package out of production binaries that link this package.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Scripted is a fake Client for tests: it returns queued replies in order
// and fails any call beyond them. It is safe for concurrent use; calls
// take replies in the order they arrive.
type Scripted struct {
	mu       sync.Mutex
	queue    []Reply
	requests []agentfleet.ModelRequest
	failures []string
}

// NewScripted returns a Scripted that will give replies, in order.
func NewScripted(replies ...Reply) *Scripted {
	return &Scripted{queue: slices.Clone(replies)}
}

// Push queues more replies after the ones already queued.
func (s *Scripted) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Requests returns a copy of every request received, in arrival order.
func (s *Scripted) Requests() []agentfleet.ModelRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Remaining is the number of replies not yet requested.
func (s *Scripted) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// AssertDone reports, through t, every unexpected call, every failed
// Check, and every reply that was never requested.
func (s *Scripted) AssertDone(t TB) {
	t.Helper()
	s.mu.Lock()
	failures, left := slices.Clone(s.failures), slices.Clone(s.queue)
	s.mu.Unlock()
	for _, f := range failures {
		t.Errorf("%s", f)
	}
	if len(left) > 0 {
		next := left[0].Content
		if left[0].Err != nil {
			next = "error: " + left[0].Err.Error()
		}
		t.Errorf("llm.Scripted: %d scripted replies never requested; the next was %q", len(left), clipText(next, 80))
	}
}

// Complete returns the next scripted reply.
func (s *Scripted) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	if err := ctx.Err(); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	return s.next(req)
}

// Stream delivers the next scripted reply line by line, then Done.
func (s *Scripted) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if err := ctx.Err(); err != nil {
		return agentfleet.ModelResponse{}, err
	}
	resp, err := s.next(req)
	if err != nil {
		return resp, err
	}
	return streamText(ctx, resp, fn)
}

func (s *Scripted) next(req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	req.Messages = slices.Clone(req.Messages) // the caller may reuse its slice
	s.mu.Lock()
	s.requests = append(s.requests, req)
	n := len(s.requests)
	if len(s.queue) == 0 {
		err := fmt.Errorf("%w #%d: no reply left (last message: %s)", ErrUnexpectedCall, n, lastMessage(req.Messages))
		s.failures = append(s.failures, err.Error())
		s.mu.Unlock()
		return agentfleet.ModelResponse{}, err
	}
	r := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()

	// Check runs outside the lock: it is test code and may be slow or
	// call back into s.
	if r.Check != nil {
		if err := r.Check(req); err != nil {
			err = fmt.Errorf("llm.Scripted: call #%d rejected by its check: %w", n, err)
			s.mu.Lock()
			s.failures = append(s.failures, err.Error())
			s.mu.Unlock()
			return agentfleet.ModelResponse{}, err
		}
	}
	if r.Err != nil {
		return agentfleet.ModelResponse{}, r.Err
	}
	resp := agentfleet.ModelResponse{Content: r.Content, Model: r.Model, Usage: r.Usage, UsageReported: !r.Unreported}
	if resp.Model == "" {
		resp.Model = ScriptedModel
	}
	if r.Unreported || r.Usage == (agentfleet.Usage{}) {
		resp.Usage = agentfleet.Usage{PromptTokens: EstimateTokens(req.Messages), CompletionTokens: agentfleet.EstimateTextTokens(r.Content)}
	}
	return resp, nil
}

// lastMessage summarises the end of a conversation for an error message.
func lastMessage(msgs []agentfleet.ChatMessage) string {
	if len(msgs) == 0 {
		return "none"
	}
	m := msgs[len(msgs)-1]
	return fmt.Sprintf("%s %q", m.Role, clipText(m.Content, 80))
}

// clipText shortens s to at most n bytes on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
