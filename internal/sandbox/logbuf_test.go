package sandbox

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestLogBuffer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		limit  int
		writes []string
		want   string
	}{
		{"under the limit", 20, []string{"abc", "def\n"}, "abcdef\n"},
		{"exactly the limit", 8, []string{"abcd", "efgh"}, "abcdefgh"},
		{"cut in one write", 8, []string{"0123456789"}, "0123\n… [2 bytes of log cut] …\n6789"},
		{"ring wraps", 8, []string{"0123", "ab", "cd", "ef", "gh", "ij"}, "0123\n… [6 bytes of log cut] …\nghij"},
		{"long write after head", 8, []string{"01", "abcdefghijklmn"}, "01ab\n… [8 bytes of log cut] …\nklmn"},
		// A cut inside a multi-byte rune moves to the rune boundary.
		{"utf8 boundaries", 8, []string{"aéééééb"}, "aé\n… [6 bytes of log cut] …\néb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var b logBuffer
			b.reset(c.limit)
			for _, w := range c.writes {
				b.WriteString(w)
			}
			got := b.String()
			require.Equal(t, c.want, got)
			require.True(t, utf8.ValidString(got))
		})
	}
	// Reuse keeps nothing of the previous turn.
	var b logBuffer
	b.reset(8)
	b.WriteString("0123456789")
	b.reset(8)
	b.WriteString("x")
	require.Equal(t, "x", b.String())
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var e encoder
	in := execMsg{seq: 7, prims: coreSet | 1<<primFetch, script: "function run(){}", args: []byte(`{"a":1}`)}
	frame := encodeExec(&e, &in)
	var buf []byte
	typ, payload, err := readFrame(bufio.NewReader(bytes.NewReader(frame)), &buf, 1<<20)
	require.NoError(t, err)
	require.Equal(t, frameExec, typ)
	out, err := decodeExec(payload)
	require.NoError(t, err)
	require.Equal(t, in, out)

	res := resultMsg{seq: 7, answered: true, answer: []byte(`"x"`), ret: []byte("null"), logHead: "h\n", logTail: "t\n", logCut: 9, errKind: kindCode("limit"), errMsg: "m", errCut: 3, cpu: 1234567 * time.Microsecond}
	frame = encodeResult(&e, &res)
	_, payload, err = readFrame(bufio.NewReader(bytes.NewReader(frame)), &buf, 1<<20)
	require.NoError(t, err)
	got, err := decodeResult(payload)
	require.NoError(t, err)
	require.Equal(t, res, got)

	// Truncated and oversized frames are errors, not panics.
	_, err = decodeExec(payload[:3])
	require.ErrorIs(t, err, errProtocol)
	_, _, err = readFrame(bufio.NewReader(bytes.NewReader(frame)), &buf, 4)
	require.ErrorIs(t, err, errProtocol)
	_, _, err = readFrame(bufio.NewReader(strings.NewReader(string(frame[:len(frame)-1]))), &buf, 1<<20)
	require.Error(t, err)
}
