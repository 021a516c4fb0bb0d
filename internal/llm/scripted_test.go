package llm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

// recorder is a TB that keeps what AssertDone reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func ask(content string) agentfleet.ModelRequest {
	return agentfleet.ModelRequest{Messages: []agentfleet.ChatMessage{{Role: agentfleet.RoleUser, Content: content}}}
}

func TestScriptedRepliesInOrder(t *testing.T) {
	t.Parallel()
	errDown := errors.New("provider down")
	var checked agentfleet.ModelRequest
	s := llm.NewScripted(
		llm.Reply{Content: "one", Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 2}},
		llm.Reply{Err: errDown},
		llm.Reply{Content: "three", Unreported: true, Model: "m3", Check: func(r agentfleet.ModelRequest) error {
			checked = r
			return nil
		}},
	)
	ctx := context.Background()

	r1, err := s.Complete(ctx, ask("a"))
	require.NoError(t, err)
	require.Equal(t, agentfleet.ModelResponse{Content: "one", Model: llm.ScriptedModel,
		Usage: agentfleet.Usage{PromptTokens: 10, CompletionTokens: 2}, UsageReported: true}, r1)

	_, err = s.Complete(ctx, ask("b"))
	require.ErrorIs(t, err, errDown)

	r3, err := s.Complete(ctx, ask("c"))
	require.NoError(t, err)
	require.Equal(t, "m3", r3.Model)
	require.False(t, r3.UsageReported)
	require.Equal(t, agentfleet.Usage{PromptTokens: llm.EstimateTokens(ask("c").Messages), CompletionTokens: agentfleet.EstimateTextTokens("three")}, r3.Usage)
	require.Equal(t, ask("c"), checked)

	require.Len(t, s.Requests(), 3)
	require.Equal(t, "b", s.Requests()[1].Messages[0].Content)
	s.AssertDone(t)
}

func TestScriptedUnexpectedCallAndLeftovers(t *testing.T) {
	t.Parallel()
	s := llm.NewScripted(llm.Reply{Content: "only"})
	_, err := s.Complete(context.Background(), ask("first"))
	require.NoError(t, err)
	_, err = s.Complete(context.Background(), ask("second"))
	require.ErrorIs(t, err, llm.ErrUnexpectedCall)
	require.ErrorContains(t, err, `"second"`, "the error shows what was asked")

	s.Push(llm.Reply{Content: "never asked for"})
	var rec recorder
	s.AssertDone(&rec)
	require.Len(t, rec.errs, 2)
	require.Contains(t, rec.errs[0], "unexpected model call #2")
	require.Contains(t, rec.errs[1], "1 scripted replies never requested")
	require.Contains(t, rec.errs[1], "never asked for")
}

func TestScriptedFailedCheckIsReported(t *testing.T) {
	t.Parallel()
	s := llm.NewScripted(llm.Reply{Content: "x", Check: func(r agentfleet.ModelRequest) error {
		if r.MaxTokens == 0 {
			return errors.New("max tokens not set")
		}
		return nil
	}})
	_, err := s.Complete(context.Background(), ask("q"))
	require.ErrorContains(t, err, "max tokens not set")
	var rec recorder
	s.AssertDone(&rec)
	require.Len(t, rec.errs, 1)
	require.Contains(t, rec.errs[0], "rejected by its check")
}

func TestScriptedConcurrent(t *testing.T) {
	t.Parallel()
	const n = 50
	replies := make([]llm.Reply, n)
	for i := range replies {
		replies[i] = llm.Reply{Content: fmt.Sprint(i)}
	}
	s := llm.NewScripted(replies...)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	for range n {
		wg.Go(func() {
			r, err := s.Complete(context.Background(), ask("q"))
			require.NoError(t, err)
			mu.Lock()
			seen[r.Content] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, seen, n, "every reply given exactly once")
	s.AssertDone(t)
}

func TestScriptedStream(t *testing.T) {
	t.Parallel()
	s := llm.NewScripted(llm.Reply{Content: "line one\nline two\n"})
	var chunks []agentfleet.ModelChunk
	resp, err := s.Stream(context.Background(), ask("q"), func(c agentfleet.ModelChunk) error {
		chunks = append(chunks, c)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []agentfleet.ModelChunk{
		{Delta: "line one\n"}, {Delta: "line two\n"}, {Done: true, Response: resp},
	}, chunks)
	s.AssertDone(t)
}
