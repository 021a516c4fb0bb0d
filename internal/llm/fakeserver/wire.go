// The wire: the server's own small JSON types of the chat completions
// format (only the fields the fleet sends and reads) and the decoding of
// a request body, with encoding/json where fastdecode.go does not apply.

package fakeserver

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentfleet/agentfleet"
)

// Wire types: only the fields the fleet sends and reads.

type wireRequest struct {
	Model               string        `json:"model"`
	Messages            []wireMessage `json:"messages"`
	MaxTokens           int           `json:"max_tokens"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	Temperature         *float64      `json:"temperature"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

type wireMessage struct {
	Role    string         `json:"role"`
	Content messageContent `json:"content"`
}

// messageContent is a message's text, sent either as a string or as an
// array of text parts. It decodes itself from the bytes the decoder has
// already checked, instead of being kept raw and decoded again: a request
// is mostly its messages' text, and this server answers thousands a
// second in the fleet's benchmarks.
type messageContent string

func (c *messageContent) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*c = ""
	case b[0] == '"':
		if s, ok := unquotePlain(b); ok {
			*c = messageContent(s)
			return nil
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = messageContent(s)
	case b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return errors.New("want a string or an array of text parts")
		}
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
		}
		*c = messageContent(sb.String())
	default:
		return errors.New("want a string or an array of text parts")
	}
	return nil
}

// unquotePlain decodes the JSON string literal b (already validated by the
// decoder) when its escapes are the one-letter ones and \u escapes of
// code points outside the surrogate range; ok is false for anything else
// (a surrogate pair, invalid UTF-8), which the caller leaves to
// encoding/json.
func unquotePlain(b []byte) (s string, ok bool) {
	b = b[1 : len(b)-1]
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		if !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	}
	out := make([]byte, 0, len(b))
	for {
		out = append(out, b[:i]...)
		if i+1 >= len(b) {
			return "", false
		}
		switch b[i+1] {
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case '"', '\\', '/':
			out = append(out, b[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'u':
			r, ok := hex4(b[i+2:])
			// A surrogate half needs its pair, or becomes U+FFFD;
			// encoding/json does that, and no client of ours sends one
			// (Go escapes only <, >, &, U+2028 and U+2029 this way).
			if !ok || utf16.IsSurrogate(r) {
				return "", false
			}
			out = utf8.AppendRune(out, r)
			i += 4
		default:
			return "", false
		}
		b = b[i+2:]
		if i = bytes.IndexByte(b, '\\'); i < 0 {
			out = append(out, b...)
			break
		}
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}

type completion struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	Model   string    `json:"model"`
	Choices []choice  `json:"choices"`
	Usage   *usageOut `json:"usage,omitempty"`
}

type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	FinishReason *string  `json:"finish_reason"`
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type usageOut struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func wireUsage(u agentfleet.Usage) *usageOut {
	return &usageOut{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.Total()}
}

// maxRequestBody bounds a request body; the fleet's prompts are far
// smaller, and a fake must not be an easy way to exhaust a test's memory.
const maxRequestBody = 32 << 20

// bodyBuffers holds request bodies while they are decoded; nothing
// decoded points into them.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func decodeRequest(r *http.Request) (Request, error) {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		buf.Reset()
		bodyBuffers.Put(buf)
	}()
	if r.ContentLength > 0 && r.ContentLength <= maxRequestBody {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, maxRequestBody)); err != nil {
		return Request{}, fmt.Errorf("read request body: %w", err)
	}
	wr, ok := decodePlain(buf.Bytes())
	if !ok {
		wr = wireRequest{}
		if err := json.Unmarshal(buf.Bytes(), &wr); err != nil {
			return Request{}, fmt.Errorf("request body is not a chat completion request: %w", err)
		}
	}
	if wr.Model == "" {
		return Request{}, errors.New("you must provide a model parameter")
	}
	if len(wr.Messages) == 0 {
		return Request{}, errors.New("messages must not be empty")
	}
	req := Request{
		Model: wr.Model, MaxTokens: wr.MaxTokens, Temperature: wr.Temperature, Stream: wr.Stream,
		Authorization: r.Header.Get("Authorization"),
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = wr.MaxCompletionTokens
	}
	req.IncludeUsage = wr.StreamOptions != nil && wr.StreamOptions.IncludeUsage
	req.JSON = wr.ResponseFormat != nil && wr.ResponseFormat.Type == "json_object"
	req.Messages = make([]agentfleet.ChatMessage, len(wr.Messages))
	for i, m := range wr.Messages {
		req.Messages[i] = agentfleet.ChatMessage{Role: m.Role, Content: string(m.Content)}
	}
	return req, nil
}

// hex4 reads the four hex digits of a \u escape at the start of b.
func hex4(b []byte) (rune, bool) {
	var h [2]byte
	if len(b) < 4 {
		return 0, false
	}
	if _, err := hex.Decode(h[:], b[:4]); err != nil {
		return 0, false
	}
	return rune(h[0])<<8 | rune(h[1]), true
}
