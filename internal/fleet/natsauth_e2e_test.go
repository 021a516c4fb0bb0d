package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/natsauth"
	"github.com/agentfleet/agentfleet/wire"
)

// authFleet is a fleet on a NATS server in JWT mode, with two tenants.
type authFleet struct {
	dev     *fleet.Dev
	admin   *client.Client
	keys    map[string]string // tenant -> API key
	dir     string
	natsURL string
}

// setupAuthFleet starts dev mode with the NATS auth it makes itself or,
// with external, on a server secured by the files agentctl nats-auth
// writes, reached by URL as a production fleet reaches its cluster.
func setupAuthFleet(t *testing.T, external bool) *authFleet {
	t.Helper()
	cfg := fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", NATSListen: "127.0.0.1:0", DataDir: t.TempDir(),
		Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}
	if external {
		dir := t.TempDir()
		setup, err := natsauth.Generate(natsauth.GenerateConfig{ResolverDir: filepath.Join(dir, "jwt")})
		require.NoError(t, err)
		require.NoError(t, setup.WriteDir(dir, false))
		emb, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", AuthConf: string(setup.ServerConf)})
		require.NoError(t, err)
		t.Cleanup(emb.Shutdown)
		cfg.NATSURL = emb.ClientURL()
		cfg.NATSCreds = filepath.Join(dir, natsauth.FileFleetCreds)
		cfg.NATSSigningKey = filepath.Join(dir, natsauth.FileSigningKey)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dev, err := fleet.StartDev(ctx, cfg, fleet.DevOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	f := &authFleet{dev: dev, admin: client.New(dev.URL(), dev.AdminToken), keys: map[string]string{}, dir: t.TempDir(), natsURL: cfg.NATSURL}
	if !external {
		f.natsURL = dev.Embedded.ClientURL()
	}
	for _, id := range []string{"acme", "globex"} {
		tv, err := f.admin.CreateTenant(ctx, wire.TenantRequest{ID: id})
		require.NoError(t, err)
		f.keys[id] = tv.APIKey
	}
	return f
}

// creds fetches tenant's creds through the API into a file.
func (f *authFleet) creds(t *testing.T, tenant string, ttl time.Duration) string {
	t.Helper()
	b, err := f.admin.NATSCreds(context.Background(), tenant, ttl)
	require.NoError(t, err)
	path := filepath.Join(f.dir, tenant+"-"+time.Now().Format("150405.000000000")+".creds")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// runOf submits a run for tenant and waits until it ends.
func (f *authFleet) runOf(t *testing.T, tenant string) agentfleet.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New(f.dev.URL(), f.keys[tenant])
	run, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: "hello from " + tenant})
	require.NoError(t, err)
	run, err = c.Wait(ctx, run.ID)
	require.NoError(t, err)
	return run
}

// tenantConn connects with a tenant's creds the way a tenant's own
// consumer would; its permission errors arrive on errs.
func (f *authFleet) tenantConn(t *testing.T, credsFile, tenant string, extra ...nats.Option) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 16)
	opts := append([]nats.Option{
		nats.UserCredentials(credsFile),
		nats.CustomInboxPrefix("_INBOX_" + tenant),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}),
	}, extra...)
	nc, err := nats.Connect(f.natsURL, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, errs
}

func requirePermissionError(t *testing.T, errs chan error, subject string) {
	t.Helper()
	select {
	case err := <-errs:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.Contains(t, err.Error(), subject)
	case <-time.After(5 * time.Second):
		t.Fatalf("no permission violation for %s", subject)
	}
}

// A tenant's creds replay its finished run's events and follow a new
// run live, through an ordered consumer of the jetstream library, and
// subscribe to its events on core NATS; another tenant's events, the
// turn queue and control subjects are refused.
func TestTenantNATSCredsReadOnlyTheirOwnEvents(t *testing.T) {
	f := setupAuthFleet(t, false)
	past := f.runOf(t, "acme")
	other := f.runOf(t, "globex")

	nc, errs := f.tenantConn(t, f.creds(t, "acme", 0), "acme")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Replay: the finished run, from its first event to done.
	cons, err := js.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"af.events.acme." + past.ID + ".>"},
	})
	require.NoError(t, err)
	evs := readUntilDone(ctx, t, cons)
	require.NotEmpty(t, evs)
	require.Equal(t, int64(1), evs[0].Seq)
	require.Equal(t, agentfleet.EventQueued, evs[0].Type)
	for _, ev := range evs {
		require.Equal(t, "acme", ev.Tenant)
		require.Equal(t, past.ID, ev.RunID)
	}

	// Live: every acme event on core NATS, and an ordered consumer over
	// the whole tenant from now on.
	live, err := nc.SubscribeSync("af.events.acme.>")
	require.NoError(t, err)
	tail, err := js.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"af.events.acme.>"}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	tailed := make(chan []agentfleet.Event, 1)
	go func() { tailed <- readUntilDone(ctx, t, tail) }()
	next := f.runOf(t, "acme")
	got := <-tailed
	require.NotEmpty(t, got)
	require.Equal(t, next.ID, got[0].RunID)
	require.Equal(t, int64(1), got[0].Seq)
	m, err := live.NextMsgWithContext(ctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(m.Subject, "af.events.acme."+next.ID+"."), m.Subject)

	// Refused: another tenant's events (core and JetStream), the turn
	// queues, control subjects, publishing.
	for _, subj := range []string{"af.events.globex.>", "af.runq.>", "af.work.>", "af.ctl.>", "_INBOX.>"} {
		_, err := nc.SubscribeSync(subj)
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		requirePermissionError(t, errs, subj)
	}
	_, err = js.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"af.events.globex." + other.ID + ".>"},
	})
	require.Error(t, err, "a consumer on another tenant's events")
	requirePermissionError(t, errs, "af.events.globex")
	require.NoError(t, nc.Publish("af.ctl.globex."+other.ID+".cancel", nil))
	require.NoError(t, nc.Flush())
	requirePermissionError(t, errs, "af.ctl.globex")
	require.NoError(t, nc.Publish("af.runq.acme."+past.ID, []byte(`{}`)))
	require.NoError(t, nc.Flush())
	requirePermissionError(t, errs, "af.runq.acme")
}

// readUntilDone reads cons up to the first terminal event; it returns
// nil (and fails t) when ctx ends first.
func readUntilDone(ctx context.Context, t *testing.T, cons jetstream.Consumer) []agentfleet.Event {
	it, err := cons.Messages()
	if err != nil {
		t.Errorf("messages: %v", err)
		return nil
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var out []agentfleet.Event
	for {
		msg, err := it.Next()
		if err != nil {
			t.Errorf("next event after %d: %v", len(out), err)
			return nil
		}
		var ev agentfleet.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			t.Errorf("event %q: %v", msg.Data(), err)
			return nil
		}
		out = append(out, ev)
		if ev.Terminal() {
			return out
		}
	}
}

// Without creds, with creds that expired, and with creds revoked, the
// server refuses the connection; revoking closes a live one. Both in dev
// mode and on a server set up with agentctl nats-auth's files.
func TestTenantNATSCredsExpireAndRevoke(t *testing.T) {
	t.Run("dev", func(t *testing.T) { testExpireAndRevoke(t, setupAuthFleet(t, false)) })
	t.Run("nats-auth files", func(t *testing.T) { testExpireAndRevoke(t, setupAuthFleet(t, true)) })
}

func testExpireAndRevoke(t *testing.T, f *authFleet) {
	url := f.natsURL

	_, err := nats.Connect(url, nats.MaxReconnects(0))
	require.Error(t, err, "no creds")
	require.ErrorIs(t, err, nats.ErrAuthorization)

	short := f.creds(t, "acme", time.Second)
	time.Sleep(2100 * time.Millisecond) // JWT expiry is in whole seconds
	_, err = nats.Connect(url, nats.UserCredentials(short), nats.MaxReconnects(0))
	require.Error(t, err, "expired creds")

	old := f.creds(t, "acme", 0)
	other := f.creds(t, "globex", 0)
	closed := make(chan struct{})
	nc, _ := f.tenantConn(t, old, "acme", nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	ncOther, _ := f.tenantConn(t, other, "globex")

	rev, err := f.admin.RevokeNATSCreds(context.Background(), "acme")
	require.NoError(t, err)
	require.Equal(t, "acme", rev.Tenant)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked creds' live connection is still open")
	}
	require.False(t, nc.IsConnected())
	_, err = nats.Connect(url, nats.UserCredentials(old), nats.MaxReconnects(0))
	require.Error(t, err, "revoked creds")
	require.True(t, ncOther.IsConnected(), "another tenant's creds are not revoked")

	// Creds issued after the revocation work.
	nc2, _ := f.tenantConn(t, f.creds(t, "acme", 0), "acme")
	_, err = nc2.SubscribeSync("af.events.acme.>")
	require.NoError(t, err)
	require.NoError(t, nc2.Flush())
	require.True(t, nc2.IsConnected())

	// Bad input is refused with the field named, before anything is
	// issued; an unknown tenant is 404.
	_, err = f.admin.NATSCreds(context.Background(), "acme", 500*time.Millisecond)
	var ae *client.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 400, ae.Status)
	require.Contains(t, ae.Message, "ttl")
	_, err = f.admin.NATSCreds(context.Background(), "nobody", 0)
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 404, ae.Status)
	_, err = client.New(f.dev.URL(), f.keys["acme"]).NATSCreds(context.Background(), "acme", 0)
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, 403, ae.Status, "a tenant key cannot issue creds")
}
