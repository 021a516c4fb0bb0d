package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
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

func TestParseAllow(t *testing.T) {
	c, err := ParseAllow("127.0.0.1, 10.0.0.0/8 ::1\tbilling.internal,*.corp.example")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}, c.Allow)
	require.Equal(t, []string{"billing.internal", "*.corp.example"}, c.AllowHosts)
	_, err = ParseAllow("http://x")
	require.ErrorContains(t, err, "not a host name")
	c, err = ParseAllow("")
	require.NoError(t, err)
	require.Empty(t, c.Allow)
}

// An allowed host name is reached whatever it resolves to; another name
// resolving to the same address is not, and neither is the address.
func TestAllowedHostName(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "inside") }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	g := New(Config{AllowHosts: []string{"billing.internal", "*.corp.example"}, Resolver: fakeResolver{
		"billing.internal": lo, "api.corp.example": lo, "other.example": lo,
	}})
	c := g.HTTPClient(0)
	for host, allowed := range map[string]bool{"billing.internal": true, "api.corp.example": true, "other.example": false, "127.0.0.1": false, "localhost": false} {
		u := fmt.Sprintf("http://%s:%d/", host, port)
		_, err := g.CheckURL(u)
		if err == nil {
			var resp *http.Response
			if resp, err = c.Get(u); err == nil {
				resp.Body.Close()
			}
		}
		if allowed {
			require.NoError(t, err, host)
			continue
		}
		var be *BlockedError
		require.ErrorAs(t, err, &be, host)
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestParseAgentEntries(t *testing.T) {
	c, err := ParseAgentEntries([]string{"billing.internal", "*.corp.example", "127.0.0.1", "10.0.0.0/8", "fd12::/16"})
	require.NoError(t, err)
	require.Equal(t, []string{"billing.internal", "*.corp.example"}, c.AllowHosts)
	require.Len(t, c.Allow, 3)
	for _, bad := range []string{"169.254.169.254", "169.254.0.0/16", "0.0.0.0/0", "100.100.100.200", "::/0", "metadata.google.internal", "*.internal", "not a host", ""} {
		_, err := ParseAgentEntries([]string{"ok.example", bad})
		require.Error(t, err, bad)
	}
}

// DenyPrivate closes what Allow, AllowHosts and With opened.
func TestDenyPrivate(t *testing.T) {
	agent, err := ParseAgentEntries([]string{"127.0.0.1", "billing.internal"})
	require.NoError(t, err)
	open := New(Config{}.With(agent))
	require.NoError(t, open.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	_, err = open.CheckURL("http://billing.internal/")
	require.NoError(t, err)

	closed := New(Config{DenyPrivate: true}.With(agent))
	require.Error(t, closed.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	require.NoError(t, closed.CheckAddr(netip.MustParseAddr("93.184.215.14")))
	_, err = closed.CheckURL("http://billing.internal/")
	require.NoError(t, err, "a name is refused at connect time, on its addresses")
	require.False(t, closed.hostAllowed("billing.internal"))
}
