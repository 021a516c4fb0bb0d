package agentfleet

import (
	"context"
	"strconv"
)

// Chat roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// ChatMessage is one message of a conversation with a model.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ModelRequest is one chat completion request.
type ModelRequest struct {
	// Model names the model; empty means the client's default.
	Model    string        `json:"model,omitempty"`
	Messages []ChatMessage `json:"messages"`
	// MaxTokens caps the completion; zero means the client's default.
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	// JSON asks for a JSON object reply where the provider supports it.
	JSON bool `json:"json,omitempty"`
}

// ModelResponse is a model's reply.
type ModelResponse struct {
	Content string `json:"content"`
	// Model is the model that answered, as the provider named it.
	Model string `json:"model"`
	Usage Usage  `json:"usage"`
	// UsageReported is false when the provider sent no usage; Usage then
	// holds a conservative estimate.
	UsageReported bool `json:"usage_reported"`
	// FinishReason is why the model stopped ("stop", "length", ...), as
	// the provider said.
	FinishReason string `json:"finish_reason,omitempty"`
}

// ModelUnavailableError is a model client's refusal of a model it cannot
// serve: an agent names a model the worker has no route to. Trying again
// cannot help, so the turn fails with it.
type ModelUnavailableError struct {
	Model  string
	Reason string
	// Err is the provider's refusal it comes from, if any.
	Err error
}

func (e *ModelUnavailableError) Error() string {
	return "model " + strconv.Quote(e.Model) + " is not served by this worker: " + e.Reason
}

func (e *ModelUnavailableError) Unwrap() error { return e.Err }

// ModelChunk is one piece of a streamed reply. The last chunk has Done set
// and carries the whole response with usage.
type ModelChunk struct {
	Delta    string
	Done     bool
	Response ModelResponse
}

// AIRequest is a sub-call to the model made by a script (ai / aiJSON).
type AIRequest struct {
	Prompt string
	// Schema, when set, asks for a JSON value of this JSON Schema.
	Schema []byte
	JSON   bool
	// Index is the call's journal index (JournalEntry.Index).
	Index int
}

// AIResponse is the reply to an AIRequest.
type AIResponse struct {
	Content string
	Usage   Usage
}

// AIFunc performs a script's model sub-call, metered through the same
// budget as the turn that made it.
type AIFunc func(ctx context.Context, req AIRequest) (AIResponse, error)

// EstimateTokens is a conservative token count for a conversation, used to
// size budget reservations before a call and to charge a call whose
// provider reported no usage. Tokenizers average about four bytes of
// English per token; we count three so code, numbers and non-Latin text
// (which tokenize denser) are not under-reserved, plus a per-message
// overhead for the role and framing tokens every chat format adds.
func EstimateTokens(msgs []ChatMessage) int64 {
	const perMessage = 4
	var n int64
	for _, m := range msgs {
		n += perMessage + EstimateTextTokens(m.Content)
	}
	return n
}

// EstimateTextTokens is EstimateTokens for one piece of text.
func EstimateTextTokens(s string) int64 {
	return (int64(len(s)) + 2) / 3
}
