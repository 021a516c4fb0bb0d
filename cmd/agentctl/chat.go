package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// chatStdin is what `agentctl chat` reads its lines from.
var chatStdin io.Reader = os.Stdin

// chatLineMax bounds one line of chat: a run's message limit.
const chatLineMax = 256 << 10

// chatCmd is `agentctl chat [--agent A] [--session S]`.
func (e cliEnv) chatCmd() *cobra.Command {
	return long(leaf("chat [flags]", "Chat with an agent: a run a line of standard input, in one session",
		"agentctl chat\nagentctl chat --agent triage --session chat-5f1c2d3e4a5b6c7d\necho 'What is 6*7?' | agentctl chat",
		func(fs *pflag.FlagSet) runFunc {
			agent := fs.String("agent", "", "agent to chat with (default: the tenant's default agent)")
			session := fs.String("session", "", "session to continue (default: a new one)")
			return func(ctx context.Context, _ []string) error { return e.chat(ctx, *agent, *session) }
		}), `Reads a message a line from standard input; each is a run in the session,
its answer printed to stdout when it ends (an error to stderr, and the chat
goes on). /new starts another session, /exit or the end of the input quits.
The session id goes to stderr at the start and the end, to continue it with
--session.`)
}

// chat reads lines until the end of the input or /exit: every line is
// a run in the session (session "": a new one), its answer printed to
// stdout when it ends (an error to stderr, and the chat goes on); /new
// starts another session. The session id goes to stderr at the start
// and the end, to continue it with --session.
func (e cliEnv) chat(ctx context.Context, agent, session string) error {
	id := session
	if id == "" {
		id = newSessionID()
	}
	c := e.client()
	prompt := func() {}
	if f, ok := chatStdin.(*os.File); ok && isTerminal(f) {
		prompt = func() { fmt.Fprint(e.stderr, "> ") }
	}
	fmt.Fprintf(e.stderr, "session %s (/new starts another, /exit quits)\n", id)
	lines, stop := readLines(chatStdin)
	defer stop()
	defer func() { fmt.Fprintf(e.stderr, "continue with: agentctl chat --session %s\n", id) }()
	for {
		prompt()
		var l line
		select {
		case <-ctx.Done():
			return nil
		case l = <-lines:
		}
		if l.err != nil {
			return fmt.Errorf("read standard input: %w", l.err)
		}
		if l.eof {
			return nil
		}
		msg := strings.TrimSpace(l.text)
		switch msg {
		case "":
			continue
		case "/exit", "/quit":
			return nil
		case "/new":
			fmt.Fprintf(e.stderr, "session %s ended; continue it with: agentctl chat --session %s\n", id, id)
			id = newSessionID()
			fmt.Fprintf(e.stderr, "session %s\n", id)
			continue
		}
		if err := e.chatTurn(ctx, c, agent, id, msg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ae *client.Error
			if !errors.As(err, &ae) {
				return err
			}
			// Refused by the API (a bad agent, budget, the queue's cap):
			// say so and read on.
			fmt.Fprintf(e.stderr, "agentctl: %v\n", err)
		}
	}
}

// chatTurn runs msg in the session and prints how it ended.
func (e cliEnv) chatTurn(ctx context.Context, c *client.Client, agent, session, msg string) error {
	run, err := c.CreateRun(ctx, wire.RunCreateRequest{Agent: agent, Message: msg, SessionID: session})
	if err != nil {
		return err
	}
	parked := false
	// The model's replies are typed on stderr as they stream (its
	// scripts too); stdout keeps the answers alone, unless both are the
	// terminal and the answer is the reply just typed.
	var typed strings.Builder // the last turn's reply, as it streamed
	err = c.Events(ctx, run.ID, 0, func(ev agentfleet.Event) error {
		if ev.Type == agentfleet.EventResponseChunk {
			if ev.Index == 1 {
				if typed.Len() > 0 {
					fmt.Fprintln(e.stderr)
				}
				typed.Reset()
			}
			typed.WriteString(ev.Text)
			fmt.Fprint(e.stderr, ev.Text)
			return nil
		}
		if ev.Type == agentfleet.EventBudgetWaiting && !parked {
			parked = true
			fmt.Fprintf(e.stderr, "(run %s waits for budget; it goes on when budget returns)\n", run.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if run, err = c.GetRun(ctx, run.ID); err != nil {
		return err
	}
	if typed.Len() > 0 && !strings.HasSuffix(typed.String(), "\n") {
		fmt.Fprintln(e.stderr)
	}
	switch run.Status {
	case agentfleet.StatusCompleted:
		answer := answerText(run.Answer)
		if strings.TrimSpace(typed.String()) != answer || !isTerminal(e.stdout) || !isTerminal(e.stderr) {
			fmt.Fprintln(e.stdout, answer)
		}
	case agentfleet.StatusCancelled:
		fmt.Fprintf(e.stderr, "run %s was cancelled\n", run.ID)
	default:
		fmt.Fprintf(e.stderr, "run %s %s: %s\n", run.ID, run.Status, run.Error)
	}
	return nil
}

// newSessionID is a fresh session id: "chat-" and 16 hex digits.
func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "chat-" + hex.EncodeToString(b[:])
}

// line is one line of input, or its end (eof), or why it could not be
// read.
type line struct {
	text string
	eof  bool
	err  error
}

// readLines reads r a line at a time into the channel it returns, so a
// chat waiting at its prompt still sees its context end. The reading
// goroutine ends at the end of the input or, once stop is called, at
// its next line; only a terminal left unread keeps it in its read until
// the process exits.
func readLines(r io.Reader) (<-chan line, func()) {
	out := make(chan line)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), chatLineMax)
		send := func(l line) bool {
			select {
			case out <- l:
				return true
			case <-done:
				return false
			}
		}
		for sc.Scan() {
			if !send(line{text: sc.Text()}) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			send(line{err: err})
			return
		}
		send(line{eof: true})
	}()
	return out, func() { close(done) }
}
