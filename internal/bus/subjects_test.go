package bus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestValidToken(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in string
		ok bool
	}{
		{"acme", true},
		{"run_01HZX-9", true},
		{"ünïcode", true},
		{"a/b", true}, // fine in a subject; msg ids use '/' as separator but only after the run id
		{"", false},
		{"a.b", false},
		{"*", false},
		{"a>", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\u00a0b", false}, // no-break space
	}
	for _, c := range cases {
		err := validToken(c.in)
		if c.ok {
			require.NoError(t, err, "%q", c.in)
		} else {
			require.ErrorIs(t, err, ErrInvalidToken, "%q", c.in)
		}
	}
}

func TestTurnMsgID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "r1/turn/3", Turn{RunID: "r1", Turn: 3}.MsgID())
	require.Equal(t, "r1/turn/3/w2", Turn{RunID: "r1", Turn: 3, Wake: 2}.MsgID())
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	n := names{prefix: "af", streamPrefix: "AF_"}
	require.Equal(t, "af.runq.acme.r1", n.queueSubject(QueueRunQ, "acme", "r1"))
	require.Equal(t, "af.work.acme.*", n.queueSubject(QueueWork, "acme", ""))
	require.Equal(t, "af.events.acme.r1.log", n.eventSubject("acme", "r1", "log"))
	require.Equal(t, "af.events.*.*.*", n.eventSubject("", "", ""))
	require.Equal(t, "af.events.acme.r1.>", n.runEvents("acme", "r1"))
	require.Equal(t, "af.dlq.acme.r1", n.dlqSubject("acme", "r1"))
	require.Equal(t, "af.ctl.acme.r1.cancel", n.ctlSubject("acme", "r1", "cancel"))
	require.Equal(t, "AF_WORK", n.queueStream(QueueWork))
	require.Equal(t, "AF_LEASE_scheduler", n.leaseBucket("scheduler"))

	toks, ok := n.tokensAfter("af.ctl.acme.r1.cancel", "ctl", 3)
	require.True(t, ok)
	require.Equal(t, []string{"acme", "r1", "cancel"}, toks)
	_, ok = n.tokensAfter("af.ctl.acme.r1", "ctl", 3)
	require.False(t, ok)

	multi := names{prefix: "prod.af", streamPrefix: "P_"}
	toks, ok = multi.tokensAfter("prod.af.runq.t.r", "runq", 2)
	require.True(t, ok)
	require.Equal(t, []string{"t", "r"}, toks)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	require.Equal(t, 50*time.Millisecond, backoff(0))
	require.Equal(t, 100*time.Millisecond, backoff(1))
	require.Equal(t, 2*time.Second, backoff(10))
	require.Equal(t, 2*time.Second, backoff(1000))
	for range 100 {
		d := reconnectDelay(20)
		require.GreaterOrEqual(t, d, 1600*time.Millisecond)
		require.LessOrEqual(t, d, 2400*time.Millisecond)
	}
}

func TestHeaderSafe(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a  b c", headerSafe("a\r\nb\nc"))
	long := headerSafe(strings.Repeat("é", maxReasonLen))
	require.LessOrEqual(t, len(long), maxReasonLen)
	require.True(t, strings.HasSuffix(long, "é"), "cut mid-rune")
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	require.True(t, isPermanent(&jetstream.APIError{Code: 400, ErrorCode: 10065}))
	require.True(t, isPermanent(&jetstream.APIError{Code: 500, ErrorCode: 10052}))
	require.False(t, isPermanent(&jetstream.APIError{Code: 503, ErrorCode: 10008}))
	require.False(t, isPermanent(errors.New("timeout")))
	require.False(t, isPermanent(jetstream.ErrNoStreamResponse))
}
