package bus_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/natsauth"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A revocation pushed through one node of a cluster reaches the others
// (their full resolvers share it) and closes a revoked user's connection
// to another node.
func TestAccountAdminRevokesAcrossACluster(t *testing.T) {
	dir := t.TempDir()
	setup, err := natsauth.Generate(natsauth.GenerateConfig{})
	require.NoError(t, err)
	require.NoError(t, setup.WriteDir(dir, false))
	iss, err := natsauth.LoadIssuer(filepath.Join(dir, natsauth.FileSigningKey), natsauth.Subjects{})
	require.NoError(t, err)

	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	dirLine := regexp.MustCompile(`dir: ".*"`)
	var nodes []*bus.Embedded
	for i, p := range ports {
		conf := dirLine.ReplaceAllString(string(setup.ServerConf), fmt.Sprintf("dir: %q", filepath.Join(dir, fmt.Sprint("jwt", i))))
		conf += fmt.Sprintf("cluster { name: af, listen: \"127.0.0.1:%d\", routes: [%s] }\n", p, strings.Join(routes, ", "))
		e, err := bus.StartEmbedded(bus.EmbeddedConfig{Name: fmt.Sprint("n", i), Listen: "127.0.0.1:0", AuthConf: conf, ReadyTimeout: 30 * time.Second})
		require.NoError(t, err)
		t.Cleanup(e.Shutdown)
		nodes = append(nodes, e)
	}

	creds := filepath.Join(dir, "acme.creds")
	b, err := iss.TenantCreds("acme", time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(creds, b, 0o600))
	closed := make(chan struct{})
	nc, err := nats.Connect(nodes[2].ClientURL(), nats.UserCredentials(creds), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // "authentication revoked" is expected
	require.NoError(t, err)
	defer nc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	userJWT, seed := iss.SystemUser()
	admin, err := bus.ConnectAccountAdmin(ctx, bus.Config{URL: nodes[0].ClientURL()}, userJWT, seed)
	require.NoError(t, err)
	defer admin.Close()
	var jwts []string
	require.Eventually(t, func() bool { // the routes form
		jwts, err = admin.LookupAccount(ctx, iss.Account())
		return err == nil && len(jwts) == 3
	}, 20*time.Second, 100*time.Millisecond, "every node answers the lookup: %v", err)

	at := time.Unix(time.Now().Unix(), 0)
	next, err := iss.RevokeTenant(jwts, "acme", at)
	require.NoError(t, err)
	require.NoError(t, admin.PushAccount(ctx, next))
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked user's connection to another node is still open")
	}
	require.Eventually(t, func() bool {
		jwts, err := admin.LookupAccount(ctx, iss.Account())
		if err != nil || len(jwts) != 3 {
			return false
		}
		for _, j := range jwts {
			if got, err := iss.RevokedAt([]string{j}, "acme"); err != nil || got.Before(at) {
				return false
			}
		}
		return true
	}, 15*time.Second, 100*time.Millisecond, "every node holds the revocation")
	_, err = nats.Connect(nodes[1].ClientURL(), nats.UserCredentials(creds), nats.NoReconnect())
	require.Error(t, err, "revoked creds on a third node")

	err = admin.PushAccount(ctx, "not a jwt")
	require.ErrorContains(t, err, "refused")
}
