package egress

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckAddr pins the connect-time rule itself, including the
// allow-list.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	g := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	for _, c := range []struct {
		addr    string
		blocked bool
	}{
		{"93.184.215.14", false},
		{"2606:4700::6810:85e5", false},
		{"::ffff:93.184.215.14", false},
		{"10.9.1.1", false}, // allowed explicitly
		{"::ffff:10.9.1.1", false},
		{"10.8.1.1", true},
		{"127.0.0.1", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"fe80::1%eth0", true},
		{"192.0.2.1", true},
		{"2001:db8::1", true},
	} {
		err := g.CheckAddr(netip.MustParseAddr(c.addr))
		require.Equal(t, c.blocked, err != nil, "%s: %v", c.addr, err)
	}
}
