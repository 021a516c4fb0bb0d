// Package fakeserver owns an OpenAI-wire fake model server for end-to-end
// tests and benchmarks: a real HTTP listener answering
// POST /v1/chat/completions (and /chat/completions), plain and streamed
// (SSE, with stream_options.include_usage), in the shapes OpenAI sends.
//
// Replies come from a pluggable Responder (by default the offline demo
// model, so a fleet pointed at the server plays the demo scripts over the
// wire). Latency, usage and faults are configurable: queued faults answer
// the next requests with 429 + Retry-After, 500, or a hang, which is how
// tests drive a client's retries and timeouts. The server counts requests
// and the replies it served (what a provider would bill), in total and by
// a key (the first user message by default), so tests can assert how often
// the model was paid, and keeps every request for Received unless its
// Config says to forget them (benchmarks send hundreds of thousands).
//
// It speaks the wire format with its own small JSON types and does not
// import openai-go: the fake must not share the client's decoder, or a
// decoding bug would be invisible on both sides.
package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm"
)

// Request is a chat completion request as the server received it.
type Request struct {
	Model    string
	Messages []agentfleet.ChatMessage
	// MaxTokens is max_tokens, or max_completion_tokens when only that
	// was sent; zero when neither.
	MaxTokens    int
	Temperature  *float64
	JSON         bool // response_format.type was json_object
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	// Authorization is the request's Authorization header.
	Authorization string
}

// FirstUser is the content of the first user message: the task, for the
// fleet's prompts.
func (r Request) FirstUser() string {
	for _, m := range r.Messages {
		if m.Role == agentfleet.RoleUser {
			return m.Content
		}
	}
	return ""
}

// Responder produces the reply to a request. A zero usage is replaced by
// the fleet's token estimate. An error answers 500 with its text, or the
// status of a *StatusError.
type Responder func(Request) (reply string, usage agentfleet.Usage, err error)

// StatusError makes a Responder answer with an HTTP error status.
type StatusError struct {
	Status     int
	Message    string
	RetryAfter string // Retry-After header value, if any
}

func (e *StatusError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Demo is a Responder playing the offline demo model (llm.Demo) under
// whatever model name it is asked for.
func Demo() Responder {
	return func(r Request) (string, agentfleet.Usage, error) {
		resp, err := llm.Demo{}.Complete(context.Background(), agentfleet.ModelRequest{
			Messages: r.Messages, MaxTokens: r.MaxTokens, JSON: r.JSON,
		})
		return resp.Content, resp.Usage, err
	}
}

// Static is a Responder that always gives reply with usage (zero usage:
// estimated).
func Static(reply string, usage agentfleet.Usage) Responder {
	return func(Request) (string, agentfleet.Usage, error) { return reply, usage, nil }
}

// Fault is a failure the server injects instead of a reply.
type Fault struct {
	// Status answers with this HTTP status (429, 500, 503, ...) and an
	// OpenAI-shaped error body.
	Status int
	// RetryAfter is sent as the Retry-After header when set ("2", or an
	// HTTP-date); RetryAfterMs as retry-after-ms.
	RetryAfter   string
	RetryAfterMs string
	// Message is the error body's message; empty means a default.
	Message string
	// Hang makes the server accept the request and never answer, until
	// the client gives up or the server closes. Status is ignored.
	Hang bool
	// BreakAfter, for a streamed request, serves the reply but drops
	// the connection after this many content chunks, as a provider whose
	// stream breaks midway (a plain request is answered as usual). The
	// reply counts as served: the provider did the work. Status is
	// ignored.
	BreakAfter int
	// Times repeats the fault for this many consecutive requests
	// (0 means once).
	Times int
}

// Config configures a Server. The zero value serves the demo model on a
// free loopback port.
type Config struct {
	// Addr is the listen address; empty means 127.0.0.1:0.
	Addr string
	// Responder produces replies; nil means Demo().
	Responder Responder
	// Model names the model in replies; empty means the requested one.
	Model string
	// Latency delays every reply (a stream's first chunk).
	Latency time.Duration
	// ChunkDelay delays each streamed chunk after the first.
	ChunkDelay time.Duration
	// ChunkSize is the bytes of content per streamed chunk; 0 means 16.
	ChunkSize int
	// OmitUsage never sends usage, like providers that ignore
	// include_usage.
	OmitUsage bool
	// RefuseStream answers every streamed request 400, as a provider
	// that does not stream.
	RefuseStream bool
	// OnChunk, when set, is called as each streamed content chunk
	// (index from 1) is about to be written: where a benchmark starts
	// the clock of a chunk's trip to its subscribers.
	OnChunk func(req Request, index int, piece string)
	// Key groups counted replies (CompletionsFor); nil means the first
	// user message.
	Key func(Request) string
	// Forget keeps no requests for Received: a benchmark's hundreds of
	// thousands of prompts would otherwise all stay in memory.
	Forget bool
}

// Server is a running fake. Close it when done.
type Server struct {
	cfg  Config
	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
	done chan struct{}
	once sync.Once

	requests atomic.Int64
	mu       sync.Mutex
	faults   []Fault
	log      []Request
	served   int
	byKey    map[string]int
}

// Start listens and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Responder == nil {
		cfg.Responder = Demo()
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 16
	}
	if cfg.Key == nil {
		cfg.Key = Request.FirstUser
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("fake model server: listen on %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln, done: make(chan struct{}), byKey: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	mux.HandleFunc("POST /chat/completions", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// HTTP/2 without TLS too, for a client that asks for it (as one
	// over TLS to a provider gets HTTP/2): many calls on one connection.
	s.srv.Protocols = new(http.Protocols)
	s.srv.Protocols.SetHTTP1(true)
	s.srv.Protocols.SetUnencryptedHTTP2(true)
	s.wg.Go(func() { _ = s.srv.Serve(ln) })
	return s, nil
}

// URL is the base URL to give a client (OPENAI_BASE_URL): http://host/v1.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/v1" }

// Close stops the server: hung requests are released, in-flight replies
// end, and Close returns when every server goroutine has.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		// Shutdown waits for handlers; they all watch s.done, so this is
		// quick. The bound only guards against a stuck client write.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err = s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
		s.wg.Wait()
	})
	return err
}

// Inject queues faults; each following request takes the next one, until
// the queue is empty and replies resume.
func (s *Server) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range faults {
		for range max(f.Times, 1) {
			f.Times = 1
			s.faults = append(s.faults, f)
		}
	}
}

// Requests is the number of chat completion requests received, faulted
// ones included.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// Completions is the number of replies served: what a provider would have
// billed.
func (s *Server) Completions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// CompletionsFor is the number of replies served for requests with key
// (Config.Key; by default the first user message).
func (s *Server) CompletionsFor(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[key]
}

// Received returns every well-formed request received, in order (none
// with Config.Forget).
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	copy(out, s.log)
	return out
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	req, err := decodeRequest(r)
	if err != nil {
		writeError(w, &StatusError{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	s.mu.Lock()
	if !s.cfg.Forget {
		s.log = append(s.log, req)
	}
	var fault *Fault
	if len(s.faults) > 0 {
		fault = &s.faults[0]
		s.faults = s.faults[1:]
	}
	s.mu.Unlock()

	if req.Stream && s.cfg.RefuseStream {
		writeError(w, &StatusError{Status: http.StatusBadRequest, Message: "stream is not supported by this server"})
		return
	}
	breakAfter := 0
	if fault != nil && fault.BreakAfter > 0 {
		breakAfter, fault = fault.BreakAfter, nil
	}
	if fault != nil {
		if fault.Hang {
			select {
			case <-r.Context().Done():
				return
			case <-s.done:
				// Drop the connection rather than answer: a hung
				// provider never sends a status.
				panic(http.ErrAbortHandler)
			}
		}
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		if fault.RetryAfterMs != "" {
			w.Header().Set("Retry-After-Ms", fault.RetryAfterMs)
		}
		msg := fault.Message
		if msg == "" {
			msg = "injected fault: " + http.StatusText(fault.Status)
		}
		writeError(w, &StatusError{Status: fault.Status, Message: msg})
		return
	}

	if !s.pause(r.Context(), s.cfg.Latency) {
		return
	}
	content, usage, err := s.cfg.Responder(req)
	if err != nil {
		var se *StatusError
		if !errors.As(err, &se) {
			se = &StatusError{Status: http.StatusInternalServerError, Message: err.Error()}
		}
		if se.RetryAfter != "" {
			w.Header().Set("Retry-After", se.RetryAfter)
		}
		writeError(w, se)
		return
	}
	if usage == (agentfleet.Usage{}) {
		usage = agentfleet.Usage{PromptTokens: agentfleet.EstimateTokens(req.Messages), CompletionTokens: agentfleet.EstimateTextTokens(content)}
	}
	model := s.cfg.Model
	if model == "" {
		model = req.Model
	}
	s.count(req)
	if req.Stream {
		s.stream(w, r, req, model, content, usage, breakAfter)
		return
	}
	body := completion{
		ID: "chatcmpl-fake", Object: "chat.completion", Created: time.Now().Unix(), Model: model,
		Choices: []choice{{Message: &message{Role: agentfleet.RoleAssistant, Content: content}, FinishReason: ptr("stop")}},
	}
	if !s.cfg.OmitUsage {
		body.Usage = wireUsage(usage)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// count records a served reply. Counting happens before the reply is
// written: like a provider, the fake has done (and billed) the work even
// if the client goes away mid-stream.
func (s *Server) count(req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	s.byKey[s.cfg.Key(req)]++
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, model, content string, usage agentfleet.Usage, breakAfter int) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(delta *message, finish *string) completion {
		return completion{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: model,
			Choices: []choice{{Delta: delta, FinishReason: finish}}}
	}
	if !send(chunk(&message{Role: agentfleet.RoleAssistant}, nil)) {
		return
	}
	// A content chunk is what send(chunk(&message{Content: piece}, nil))
	// writes, spelled out: benchmarks run the fake in the fleet's
	// process, and dozens of reflective encodings a reply would be
	// counted as the fleet's CPU.
	head, _ := json.Marshal(chunk(&message{Content: "\x00"}, nil))
	pre, post, _ := strings.Cut(string(head), `"\u0000"`)
	buf := make([]byte, 0, 256)
	sendContent := func(piece string) bool {
		buf = append(append(buf[:0], "data: "...), pre...)
		buf = appendJSONString(buf, piece)
		buf = append(append(buf, post...), "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	n := 0
	for piece := range pieces(content, s.cfg.ChunkSize) {
		if !s.pause(r.Context(), s.cfg.ChunkDelay) {
			return
		}
		if breakAfter > 0 && n == breakAfter {
			// Cut the connection mid-reply, as a broken stream would.
			panic(http.ErrAbortHandler)
		}
		n++
		if s.cfg.OnChunk != nil {
			s.cfg.OnChunk(req, n, piece)
		}
		if !sendContent(piece) {
			return
		}
	}
	if !send(chunk(&message{}, ptr("stop"))) {
		return
	}
	if req.IncludeUsage && !s.cfg.OmitUsage {
		if !send(completion{ID: "chatcmpl-fake", Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: model,
			Choices: []choice{}, Usage: wireUsage(usage)}) {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// pause waits d unless the client leaves or the server closes; it reports
// whether to go on.
func (s *Server) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// pieces splits s into chunks of about size bytes, on rune boundaries.
func pieces(s string, size int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			n := min(size, len(s))
			for n < len(s) && s[n]&0xC0 == 0x80 {
				n++
			}
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}

func writeError(w http.ResponseWriter, e *StatusError) {
	typ := "server_error"
	switch {
	case e.Status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case e.Status < 500:
		typ = "invalid_request_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": e.Message, "type": typ, "code": nil}})
}

func ptr[T any](v T) *T { return &v }

// appendJSONString appends s as a JSON string, as encoding/json writes it
// without HTML escaping.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
