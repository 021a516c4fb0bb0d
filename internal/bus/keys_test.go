package bus_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
)

func TestKeyRevokedReachesEverySubscriber(t *testing.T) {
	t.Parallel()
	s := setup(t)
	other := bustest.Connect(t, s.e) // another dispatcher's connection
	got := make(chan string, 2)
	for _, b := range []*bus.Bus{s.b, other} {
		unsubscribe, err := b.SubscribeKeyRevoked(func(id string) { got <- id })
		require.NoError(t, err)
		defer unsubscribe()
	}
	controls := make(chan string, 1)
	unsubscribe, err := s.b.SubscribeControl(func(tenant, runID, verb string) { controls <- tenant + "/" + runID + "/" + verb })
	require.NoError(t, err)
	defer unsubscribe()

	require.NoError(t, s.b.PublishKeyRevoked(s.ctx, "key_0123"))
	for range 2 {
		select {
		case id := <-got:
			require.Equal(t, "key_0123", id)
		case <-s.ctx.Done():
			t.Fatal("revocation not received")
		}
	}
	// The control subscription does not take it for a run's verb: a
	// control sent after it is the first thing it sees.
	require.NoError(t, s.b.PublishControl(s.ctx, "acme", "run1", bus.VerbCancel))
	select {
	case c := <-controls:
		require.Equal(t, "acme/run1/cancel", c)
	case <-s.ctx.Done():
		t.Fatal("control message not received")
	}
	require.ErrorIs(t, s.b.PublishKeyRevoked(s.ctx, "key.1"), bus.ErrInvalidToken)
	require.ErrorIs(t, s.b.PublishKeyRevoked(s.ctx, ""), bus.ErrInvalidToken)
}
