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
	// fleetCreds is the fleet's own user, which sees every consumer.
	fleetCreds string
}

// setupAuthFleet starts dev mode with the NATS auth it makes itself or,
// with external, on a server secured by the files agentctl nats-auth
// writes, reached by URL as a production fleet reaches its cluster.
func setupAuthFleet(t *testing.T, external bool, mods ...func(*fleet.Config)) *authFleet {
	t.Helper()
	cfg := fleet.Config{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", NATSListen: "127.0.0.1:0", DataDir: t.TempDir(),
		Workers: 1, WorkerSlots: 2, DrainTimeout: 5 * time.Second,
	}
	for _, m := range mods {
		m(&cfg)
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

	f := &authFleet{dev: dev, admin: client.New(dev.URL(), dev.AdminToken), keys: map[string]string{}, dir: t.TempDir(), natsURL: cfg.NATSURL,
		fleetCreds: dev.Config.NATSCreds}
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
	js, err := jetstream.NewWithAPIPrefix(nc, "af.js.acme")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Replay: the finished run, from its first event to done, through
	// the tenant's API prefix.
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
	require.ErrorContains(t, err, `filter_subject "af.events.globex.`, "a consumer on another tenant's events")
	direct, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = direct.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"af.events.acme.>"},
	})
	require.Error(t, err, "the JetStream API itself, without the tenant's prefix")
	requirePermissionError(t, errs, "$JS.API.CONSUMER.CREATE")
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

// fleetConsumers lists, as the fleet's own user sees them, the consumers
// on AF_EVENTS that read any of tenant's subjects.
func (f *authFleet) fleetConsumers(t *testing.T, tenant string) []*jetstream.ConsumerInfo {
	t.Helper()
	nc, err := nats.Connect(f.natsURL, nats.UserCredentials(f.fleetCreds))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "AF_EVENTS")
	require.NoError(t, err)
	var out []*jetstream.ConsumerInfo
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		for _, fs := range append([]string{ci.Config.FilterSubject}, ci.Config.FilterSubjects...) {
			if strings.HasPrefix(fs, "af.events."+tenant+".") || strings.HasPrefix(fs, "af.batches."+tenant+".") {
				out = append(out, ci)
				break
			}
		}
	}
	require.NoError(t, l.Err())
	return out
}

// A tenant's creds make only what ends with its connection: no durable
// consumer and no push consumer delivering outside its inboxes (neither
// through the JetStream API itself nor through its API prefix), at most
// 16 consumers at once, and none of another's consumers is theirs to
// read or delete. Revoking the creds removes every consumer made with
// them, and nothing is delivered any more.
func TestTenantNATSCredsConsumerGuards(t *testing.T) {
	f := setupAuthFleet(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, errs := f.tenantConn(t, f.creds(t, "acme", 0), "acme")

	// The JetStream API itself is closed to tenant creds: a durable
	// create, a push consumer onto the work queue.
	for subj, body := range map[string]string{
		"$JS.API.CONSUMER.DURABLE.CREATE.AF_EVENTS.keep":          `{"stream_name":"AF_EVENTS","config":{"durable_name":"keep","filter_subject":"af.events.acme.>","ack_policy":"none"}}`,
		"$JS.API.CONSUMER.CREATE.AF_EVENTS.keep.af.events.acme.>": `{"stream_name":"AF_EVENTS","config":{"durable_name":"keep","filter_subject":"af.events.acme.>","ack_policy":"none"}}`,
		"$JS.API.CONSUMER.CREATE.AF_EVENTS.push.af.events.acme.>": `{"stream_name":"AF_EVENTS","config":{"name":"push","deliver_subject":"af.work.acme.x","filter_subject":"af.events.acme.>","ack_policy":"none"}}`,
	} {
		_, err := nc.Request(subj, []byte(body), time.Second)
		require.Error(t, err, subj)
		requirePermissionError(t, errs, subj)
	}
	require.Empty(t, f.fleetConsumers(t, "acme"))

	// Through the tenant's API prefix: refused, each naming its field.
	js, err := jetstream.NewWithAPIPrefix(nc, "af.js.acme")
	require.NoError(t, err)
	for _, c := range []struct {
		cfg  jetstream.ConsumerConfig
		want string
	}{
		{jetstream.ConsumerConfig{Durable: "keep", FilterSubject: "af.events.acme.>"}, `durable_name "keep"`},
		{jetstream.ConsumerConfig{Name: "push", DeliverSubject: "af.work.acme.x", FilterSubject: "af.events.acme.>"}, `deliver_subject "af.work.acme.x"`},
		{jetstream.ConsumerConfig{Name: "push", DeliverSubject: "_INBOX.x", FilterSubject: "af.events.acme.>"}, `deliver_subject "_INBOX.x"`},
		{jetstream.ConsumerConfig{Name: "other", FilterSubject: "af.events.globex.>"}, `filter_subject "af.events.globex.>"`},
		{jetstream.ConsumerConfig{Name: "all", FilterSubject: "af.events.>"}, `filter_subject "af.events.>"`},
		{jetstream.ConsumerConfig{Name: "nofilter"}, "filter_subject: required"},
		{jetstream.ConsumerConfig{Name: "acks", FilterSubject: "af.events.acme.>", AckPolicy: jetstream.AckExplicitPolicy}, "ack_policy"},
	} {
		_, err := js.CreateOrUpdateConsumer(ctx, "AF_EVENTS", c.cfg)
		require.ErrorContains(t, err, c.want)
	}
	_, err = nc.Request("af.js.acme.CONSUMER.DURABLE.CREATE.AF_EVENTS.keep", []byte(`{"stream_name":"AF_EVENTS","config":{"durable_name":"keep","filter_subject":"af.events.acme.>"}}`), 5*time.Second)
	require.NoError(t, err) // an API error in the reply, as the server's own
	require.Empty(t, f.fleetConsumers(t, "acme"))

	// A push consumer onto the tenant's own inbox, and ordered
	// consumers up to 16 at once; the 17th is refused.
	pushed, err := nc.SubscribeSync("_INBOX_acme.push")
	require.NoError(t, err)
	_, err = js.CreateOrUpdatePushConsumer(ctx, "AF_EVENTS", jetstream.ConsumerConfig{
		Name: "push", DeliverSubject: "_INBOX_acme.push", FilterSubject: "af.events.acme.>", DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy: jetstream.AckNonePolicy,
	})
	require.NoError(t, err)
	for i := range 15 {
		_, err := js.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"af.events.acme.>"}})
		require.NoError(t, err, "consumer %d", i+2)
	}
	_, err = js.OrderedConsumer(ctx, "AF_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"af.events.acme.>"}})
	require.ErrorIs(t, err, jetstream.ErrMaximumConsumersLimit, "the 17th consumer")
	held := f.fleetConsumers(t, "acme")
	require.Len(t, held, 16)
	for _, ci := range held {
		require.Empty(t, ci.Config.Durable, ci.Name)
		require.LessOrEqual(t, ci.Config.InactiveThreshold, 30*time.Second, ci.Name)
	}
	st, err := js.Stream(ctx, "AF_EVENTS") // what the nats CLI asks first
	require.NoError(t, err)
	require.Equal(t, "AF_EVENTS", st.CachedInfo().Config.Name)
	require.Zero(t, st.CachedInfo().State.Msgs, "the stream's state is every tenant's")
	var listed []string
	for name := range st.ConsumerNames(ctx).Name() {
		listed = append(listed, name)
	}
	require.Len(t, listed, 16, "acme lists its own consumers")
	run := f.runOf(t, "acme")
	m, err := pushed.NextMsgWithContext(ctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(m.Subject, "af.events.acme."+run.ID+"."), m.Subject)

	// Another tenant's consumer is not acme's to see, pull or delete.
	ncG, _ := f.tenantConn(t, f.creds(t, "globex", 0), "globex")
	jsG, err := jetstream.NewWithAPIPrefix(ncG, "af.js.globex")
	require.NoError(t, err)
	theirs, err := jsG.CreateOrUpdateConsumer(ctx, "AF_EVENTS", jetstream.ConsumerConfig{Name: "theirs", FilterSubject: "af.events.globex.>", AckPolicy: jetstream.AckNonePolicy})
	require.NoError(t, err)
	_, err = js.Consumer(ctx, "AF_EVENTS", theirs.CachedInfo().Name)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	for name := range st.ConsumerNames(ctx).Name() {
		require.NotEqual(t, "theirs", name, "acme lists only its own")
	}
	require.ErrorIs(t, js.DeleteConsumer(ctx, "AF_EVENTS", "theirs"), jetstream.ErrConsumerNotFound)
	pull, err := nc.Request("af.js.acme.CONSUMER.MSG.NEXT.AF_EVENTS.theirs", []byte(`{"batch":1,"no_wait":true}`), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "409", pull.Header.Get("Status"), "a pull from another's consumer")
	require.Empty(t, pull.Data)
	_, err = f.admin.RevokeNATSCreds(ctx, "globex")
	require.NoError(t, err)
	require.Empty(t, f.fleetConsumers(t, "globex"), "revoking globex's creds removed its consumer")
	require.Len(t, f.fleetConsumers(t, "acme"), 16, "and none of acme's")

	// Revoked: no consumer made with acme's creds is left, and the push
	// consumer's inbox receives nothing more, though a new creds of acme
	// listens on it while acme's runs go on.
	_, err = f.admin.RevokeNATSCreds(ctx, "acme")
	require.NoError(t, err)
	require.Empty(t, f.fleetConsumers(t, "acme"), "revoking acme's creds removes every consumer made with them")
	nc2, _ := f.tenantConn(t, f.creds(t, "acme", 0), "acme")
	after, err := nc2.SubscribeSync("_INBOX_acme.push")
	require.NoError(t, err)
	require.NoError(t, nc2.Flush())
	f.runOf(t, "acme")
	_, err = after.NextMsg(500 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "a revoked creds' push consumer delivered")
}

// The tenants' API answers only onto the asking tenant's own inboxes: a
// request whose reply subject is the work queue publishes nothing there.
func TestTenantNATSAPIRepliesOnlyToTenantInboxes(t *testing.T) {
	f := setupAuthFleet(t, false)
	fleetNC, err := nats.Connect(f.natsURL, nats.UserCredentials(f.fleetCreds))
	require.NoError(t, err)
	defer fleetNC.Close()
	spy, err := fleetNC.SubscribeSync("af.work.acme.>")
	require.NoError(t, err)
	require.NoError(t, fleetNC.Flush())
	nc, errs := f.tenantConn(t, f.creds(t, "acme", 0), "acme")
	require.NoError(t, nc.PublishRequest("af.js.acme.CONSUMER.INFO.AF_EVENTS.x", "af.work.acme.x", nil))
	require.NoError(t, nc.PublishRequest("af.js.acme.CONSUMER.MSG.NEXT.AF_EVENTS.x", "_INBOX_globex.x", []byte(`{"batch":1}`)))
	require.NoError(t, nc.PublishRequest("af.js.globex.CONSUMER.INFO.AF_EVENTS.x", "_INBOX_acme.x", nil))
	require.NoError(t, nc.Flush())
	requirePermissionError(t, errs, "af.js.globex")
	_, err = spy.NextMsg(500 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "the fleet published a reply onto the work queue")
}

// AGENTFLEET_NATS_TENANT_CONSUMERS sets the cap, on a fleet whose NATS
// is set up with agentctl nats-auth's files; a consumer deleted frees
// its place at once.
func TestTenantNATSCredsConsumerCapConfigured(t *testing.T) {
	f := setupAuthFleet(t, true, func(c *fleet.Config) { c.NATSTenantConsumers = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _ := f.tenantConn(t, f.creds(t, "acme", 0), "acme")
	js, err := jetstream.NewWithAPIPrefix(nc, "af.js.acme")
	require.NoError(t, err)
	pull := func(name string) error {
		_, err := js.CreateConsumer(ctx, "AF_EVENTS", jetstream.ConsumerConfig{Name: name, FilterSubject: "af.events.acme.>", AckPolicy: jetstream.AckNonePolicy})
		return err
	}
	require.NoError(t, pull("a"))
	require.NoError(t, pull("b"))
	require.ErrorIs(t, pull("c"), jetstream.ErrMaximumConsumersLimit)
	require.NoError(t, js.DeleteConsumer(ctx, "AF_EVENTS", "a"))
	require.NoError(t, pull("c"))
	require.Len(t, f.fleetConsumers(t, "acme"), 2)
}
