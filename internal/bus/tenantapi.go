package bus

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A tenant's NATS creds never reach the JetStream API: NATS permissions
// see a request's subject, not its body, so they cannot refuse a durable
// consumer or a push consumer delivering onto the work queue. The creds
// may publish only to <p>.js.<tenant>.> (TenantAPIPrefix), and TenantAPI,
// running in the dispatchers, checks each request there and makes the
// allowed ones on the fleet's own connection.

const (
	// TenantConsumersDefault is TenantAPIConfig.MaxConsumers' default
	// (AGENTFLEET_NATS_TENANT_CONSUMERS).
	TenantConsumersDefault = 16
	// TenantConsumerInactive is the longest a tenant's consumer outlives
	// its last pull request or its push subscriber, i.e. its connection.
	TenantConsumerInactive = 30 * time.Second
	// tenantMetaKey marks a consumer made through TenantAPI with its
	// tenant, so every dispatcher can count and remove a tenant's
	// consumers without shared state.
	tenantMetaKey  = "agentfleet_tenant"
	tenantAPIQueue = "agentfleet-tenant-js"
	jsAPI          = "$JS.API."
)

// TenantAPIPrefix is the JetStream API prefix of tenant's connections
// (nats.go jetstream.NewWithAPIPrefix, the nats CLI's --js-api-prefix).
func (b *Bus) TenantAPIPrefix(tenant string) string { return b.n.prefix + ".js." + tenant }

// TenantInboxPrefix is the inbox prefix of tenant's connections: the
// only subjects its pull requests, API replies and push consumers may
// deliver to (natsauth.InboxPrefix grants the same subjects).
func TenantInboxPrefix(tenant string) string { return "_INBOX_" + tenant }

// TenantAPIConfig shapes ServeTenantAPI.
type TenantAPIConfig struct {
	// MaxConsumers bounds the consumers one tenant holds at once
	// (default TenantConsumersDefault).
	MaxConsumers int
	// Concurrency bounds the requests served at once (default 64).
	Concurrency int
}

// TenantAPI serves tenants' JetStream requests: on the events stream only,
// it creates ephemeral consumers (pull, or push onto the tenant's own
// inboxes) filtered to the tenant's subjects, at most MaxConsumers per
// tenant, each gone TenantConsumerInactive after its client; and it
// answers info, delete and pull requests for the tenant's own consumers
// and lists them, and gives the stream's name and configuration (not
// its state). Anything else is refused with a JetStream API error.
type TenantAPI struct {
	b   *Bus
	cfg TenantAPIConfig
	sub *nats.Subscription
	sem chan struct{}

	mu      sync.Mutex
	closed  bool
	wg      sync.WaitGroup
	untrack func()
	locks   sync.Map // tenant -> *sync.Mutex: creates of one tenant in turn
}

// ServeTenantAPI subscribes (in a queue group shared by every
// dispatcher) to every tenant's API prefix until Close or the Bus's
// Close.
func (b *Bus) ServeTenantAPI(cfg TenantAPIConfig) (*TenantAPI, error) {
	if cfg.MaxConsumers <= 0 {
		cfg.MaxConsumers = TenantConsumersDefault
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if err := b.checkConn(); err != nil {
		return nil, fmt.Errorf("tenant jetstream api: %w", err)
	}
	a := &TenantAPI{b: b, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}
	sub, err := b.nc.QueueSubscribe(b.TenantAPIPrefix("*")+".>", tenantAPIQueue, a.dispatch)
	if err != nil {
		return nil, fmt.Errorf("tenant jetstream api: %w", err)
	}
	a.sub = sub
	if a.untrack, err = b.track(a.stop); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	ctx, cancel := b.opCtx(context.Background())
	defer cancel()
	if err := b.nc.FlushWithContext(ctx); err != nil {
		a.Close()
		return nil, fmt.Errorf("tenant jetstream api: %w", err)
	}
	return a, nil
}

// Close stops serving and waits for the requests in progress.
func (a *TenantAPI) Close() {
	a.untrack()
	a.stop()
}

func (a *TenantAPI) stop() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.mu.Unlock()
	_ = a.sub.Unsubscribe()
	a.wg.Wait()
}

// dispatch runs on the subscription's goroutine: it hands each request
// to its own goroutine, at most Concurrency at once (then it waits, and
// the server buffers the rest).
func (a *TenantAPI) dispatch(m *nats.Msg) {
	a.sem <- struct{}{}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.sem
		return
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer func() { <-a.sem; a.wg.Done() }()
		a.serve(m)
	}()
}

// tenantReq is one request of a tenant: its subject after the API prefix,
// split in tokens.
type tenantReq struct {
	m      *nats.Msg
	tenant string
	api    []string
}

func (a *TenantAPI) serve(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, a.b.n.prefix+".js.")
	if !ok {
		return
	}
	tenant, api, _ := strings.Cut(rest, ".")
	if validToken(tenant) != nil || !strings.HasPrefix(m.Reply, TenantInboxPrefix(tenant)+".") {
		// Answer only onto the tenant's own inboxes: a reply subject
		// elsewhere would have the fleet publish onto it.
		return
	}
	r := tenantReq{m: m, tenant: tenant, api: strings.Split(api, ".")}
	ctx, cancel := a.b.apiCtx(a.b.ctx)
	defer cancel()
	stream := a.b.n.stream(streamEvents)
	switch {
	case r.is("CONSUMER", "CREATE") && len(r.api) >= 3:
		a.create(ctx, r, stream)
	case r.is("CONSUMER", "DURABLE", "CREATE"):
		r.fail(400, 0, "durable consumers are not available to tenant creds: create an ephemeral one (no durable_name)")
	case r.is("CONSUMER", "INFO") && len(r.api) == 4, r.is("CONSUMER", "DELETE") && len(r.api) == 4:
		a.own(ctx, r, stream, r.api[2], r.api[3], func(raw []byte) {
			if r.api[1] == "INFO" {
				r.respond(raw)
				return
			}
			a.relay(ctx, r, jsAPI+"CONSUMER.DELETE."+stream+"."+r.api[3], nil)
		})
	case r.is("CONSUMER", "MSG", "NEXT") && len(r.api) == 5:
		a.pull(ctx, r, stream, r.api[3], r.api[4])
	case r.is("STREAM", "NAMES") && len(r.api) == 2:
		// What a client looking a subject's stream up (the nats CLI)
		// asks first: the tenant has the one.
		b, _ := json.Marshal(map[string]any{"type": "io.nats.jetstream.api.v1.stream_names_response",
			"total": 1, "offset": 0, "limit": 1, "streams": []string{stream}})
		r.respond(b)
	case (r.is("CONSUMER", "NAMES") || r.is("CONSUMER", "LIST")) && len(r.api) == 3 && r.api[2] == stream:
		a.list(ctx, r)
	case r.is("STREAM", "INFO") && len(r.api) == 3 && r.api[2] == stream:
		a.streamInfo(ctx, r, stream)
	default:
		r.fail(400, 0, fmt.Sprintf("%s is not available to tenant creds: they create, read, pull from and delete their own consumers on %s", api, stream))
	}
}

func (r tenantReq) is(tokens ...string) bool {
	if len(r.api) < len(tokens) {
		return false
	}
	for i, t := range tokens {
		if r.api[i] != t {
			return false
		}
	}
	return true
}

func (r tenantReq) respond(data []byte) { _ = r.m.Respond(data) }

// fail answers a JetStream API error, as the server would.
func (r tenantReq) fail(code int, errCode jetstream.ErrorCode, desc string) {
	b, _ := json.Marshal(map[string]any{"error": jetstream.APIError{Code: code, ErrorCode: errCode, Description: desc}})
	r.respond(b)
}

// relay makes the request on the fleet's connection and answers with
// the server's reply.
func (a *TenantAPI) relay(ctx context.Context, r tenantReq, subject string, data []byte) {
	resp, err := a.b.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		r.fail(503, 0, "agentfleet: the JetStream API did not answer: "+err.Error())
		return
	}
	r.respond(resp.Data)
}

// list answers CONSUMER.NAMES or CONSUMER.LIST with the tenant's own
// consumers, all on one page (there are at most MaxConsumers).
func (a *TenantAPI) list(ctx context.Context, r tenantReq) {
	held, err := a.b.tenantConsumers(ctx, r.tenant)
	if err != nil {
		r.fail(503, 0, "agentfleet: "+err.Error())
		return
	}
	page := map[string]any{"total": len(held), "offset": 0, "limit": max(len(held), 1)}
	if r.api[1] == "NAMES" {
		names := []string{}
		for _, c := range held {
			names = append(names, c.name)
		}
		page["type"], page["consumers"] = "io.nats.jetstream.api.v1.consumer_names_response", names
	} else {
		infos := []json.RawMessage{}
		for _, c := range held {
			infos = append(infos, c.raw)
		}
		page["type"], page["consumers"] = "io.nats.jetstream.api.v1.consumer_list_response", infos
	}
	b, _ := json.Marshal(page)
	r.respond(b)
}

// streamInfo answers the stream's configuration and nothing of its
// state: its counts and subjects are every tenant's.
func (a *TenantAPI) streamInfo(ctx context.Context, r tenantReq, stream string) {
	resp, err := a.b.nc.RequestWithContext(ctx, jsAPI+"STREAM.INFO."+stream, nil)
	if err != nil {
		r.fail(503, 0, "agentfleet: the JetStream API did not answer: "+err.Error())
		return
	}
	var info map[string]json.RawMessage
	if err := json.Unmarshal(resp.Data, &info); err != nil || info["error"] != nil {
		r.respond(resp.Data)
		return
	}
	out := map[string]json.RawMessage{"state": json.RawMessage(`{}`)}
	for _, k := range []string{"type", "config", "created", "ts", "cluster"} {
		if v, ok := info[k]; ok {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	r.respond(b)
}

// createRequest is the body of $JS.API.CONSUMER.CREATE.
type createRequest struct {
	Stream   string                    `json:"stream_name"`
	Config   *jetstream.ConsumerConfig `json:"config"`
	Action   string                    `json:"action,omitempty"`
	Pedantic bool                      `json:"pedantic,omitempty"`
}

func (a *TenantAPI) create(ctx context.Context, r tenantReq, stream string) {
	if r.api[2] != stream {
		r.fail(400, 0, fmt.Sprintf("stream %q: tenant creds read only %s", r.api[2], stream))
		return
	}
	var req createRequest
	if err := json.Unmarshal(r.m.Data, &req); err != nil || req.Config == nil {
		r.fail(400, 0, fmt.Sprintf("consumer create request: want {\"stream_name\",\"config\"} JSON (%v)", err))
		return
	}
	cfg := req.Config
	if len(r.api) >= 4 {
		if cfg.Name != "" && cfg.Name != r.api[3] {
			r.fail(400, 0, fmt.Sprintf("name %q differs from the subject's %q", cfg.Name, r.api[3]))
			return
		}
		cfg.Name = r.api[3]
	}
	if len(r.api) >= 5 && strings.Join(r.api[4:], ".") != cfg.FilterSubject {
		r.fail(400, 0, fmt.Sprintf("filter_subject %q differs from the subject's %q", cfg.FilterSubject, strings.Join(r.api[4:], ".")))
		return
	}
	if msg := a.checkConsumer(r.tenant, cfg); msg != "" {
		r.fail(400, 0, msg)
		return
	}
	if cfg.Name == "" {
		cfg.Name = r.tenant + "_" + strings.ToLower(rand.Text())
	}
	if cfg.InactiveThreshold <= 0 || cfg.InactiveThreshold > TenantConsumerInactive {
		cfg.InactiveThreshold = TenantConsumerInactive
	}
	meta := map[string]string{}
	for k, v := range cfg.Metadata {
		meta[k] = v
	}
	meta[tenantMetaKey] = r.tenant
	cfg.Metadata = meta
	req.Stream = stream

	mu, _ := a.locks.LoadOrStore(r.tenant, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	_, owner, found, err := a.b.consumerInfo(ctx, stream, cfg.Name)
	if err != nil {
		r.fail(503, 0, "agentfleet: "+err.Error())
		return
	}
	if found && owner != r.tenant {
		r.fail(400, 0, fmt.Sprintf("consumer name %q is taken: pick another", cfg.Name))
		return
	}
	if !found {
		held, err := a.b.TenantConsumers(ctx, r.tenant)
		if err != nil {
			r.fail(503, 0, "agentfleet: "+err.Error())
			return
		}
		if len(held) >= a.cfg.MaxConsumers {
			r.fail(400, jetstream.JSErrCodeMaximumConsumersLimit, a.capMessage(r.tenant))
			return
		}
		// Refused by the server if one of that name appeared meanwhile.
		req.Action = "create"
	}
	subject := jsAPI + "CONSUMER.CREATE." + stream + "." + cfg.Name
	if cfg.FilterSubject != "" && len(cfg.FilterSubjects) == 0 {
		subject += "." + cfg.FilterSubject
	}
	body, err := json.Marshal(req)
	if err != nil {
		r.fail(500, 0, "agentfleet: "+err.Error())
		return
	}
	resp, err := a.b.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		r.fail(503, 0, "agentfleet: the JetStream API did not answer: "+err.Error())
		return
	}
	if !found {
		// Another dispatcher may have created one for this tenant at
		// the same moment: count again, and give this one up if over.
		held, err := a.b.TenantConsumers(ctx, r.tenant)
		if err == nil && len(held) > a.cfg.MaxConsumers {
			_, _ = a.b.nc.RequestWithContext(ctx, jsAPI+"CONSUMER.DELETE."+stream+"."+cfg.Name, nil)
			r.fail(400, jetstream.JSErrCodeMaximumConsumersLimit, a.capMessage(r.tenant))
			return
		}
	}
	r.respond(resp.Data)
}

func (a *TenantAPI) capMessage(tenant string) string {
	return fmt.Sprintf("tenant %s holds %d consumers, the most it may at once (AGENTFLEET_NATS_TENANT_CONSUMERS): delete one, or wait %s for an abandoned one to go",
		tenant, a.cfg.MaxConsumers, TenantConsumerInactive)
}

// checkConsumer says what in cfg a tenant may not have ("" when nothing).
func (a *TenantAPI) checkConsumer(tenant string, cfg *jetstream.ConsumerConfig) string {
	if cfg.Durable != "" {
		return fmt.Sprintf("durable_name %q: durable consumers are not available to tenant creds: create an ephemeral one (no durable_name)", cfg.Durable)
	}
	if cfg.DeliverSubject != "" && !strings.HasPrefix(cfg.DeliverSubject, TenantInboxPrefix(tenant)+".") {
		return fmt.Sprintf("deliver_subject %q: a push consumer of tenant creds delivers under %s. only (its inbox prefix)", cfg.DeliverSubject, TenantInboxPrefix(tenant))
	}
	if cfg.Name != "" && validToken(cfg.Name) != nil {
		return fmt.Sprintf("name %q: not a subject token", cfg.Name)
	}
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append([]string{cfg.FilterSubject}, filters...)
	}
	own := []string{a.b.n.prefix + ".events." + tenant + ".", a.b.n.prefix + ".batches." + tenant + "."}
	if len(filters) == 0 {
		return fmt.Sprintf("filter_subject: required, within %s> or %s>", own[0], own[1])
	}
	for _, f := range filters {
		if !(strings.HasPrefix(f, own[0]) && len(f) > len(own[0])) && !(strings.HasPrefix(f, own[1]) && len(f) > len(own[1])) {
			return fmt.Sprintf("filter_subject %q: tenant creds read only %s> and %s>", f, own[0], own[1])
		}
	}
	if cfg.AckPolicy != jetstream.AckNonePolicy {
		return fmt.Sprintf("ack_policy %q: tenant creds read without acks (ack_policy none, as ordered consumers do)", cfg.AckPolicy)
	}
	if cfg.Replicas > 1 {
		return fmt.Sprintf("num_replicas %d: a tenant's consumer has one replica", cfg.Replicas)
	}
	return ""
}

// own calls fn with the consumer's info when it is tenant's; otherwise
// it answers "consumer not found", whoever's it is.
func (a *TenantAPI) own(ctx context.Context, r tenantReq, stream, gotStream, name string, fn func(raw []byte)) {
	if gotStream != stream {
		r.fail(404, jetstream.JSErrCodeStreamNotFound, "stream not found")
		return
	}
	raw, owner, found, err := a.b.consumerInfo(ctx, stream, name)
	switch {
	case err != nil:
		r.fail(503, 0, "agentfleet: "+err.Error())
	case !found || owner != r.tenant:
		r.fail(404, jetstream.JSErrCodeConsumerNotFound, "consumer not found")
	default:
		fn(raw)
	}
}

// pull forwards a pull request for the tenant's own consumer; the server
// delivers to the request's reply subject, which serve checked is one of
// the tenant's inboxes. Another's consumer is reported deleted.
func (a *TenantAPI) pull(ctx context.Context, r tenantReq, stream, gotStream, name string) {
	_, owner, found, err := a.b.consumerInfo(ctx, stream, name)
	if err != nil || gotStream != stream || !found || owner != r.tenant {
		if err != nil {
			a.b.log.Warn("tenant pull request", "tenant", r.tenant, "err", err)
		}
		_ = a.b.nc.PublishMsg(&nats.Msg{Subject: r.m.Reply, Header: nats.Header{"Status": {"409"}, "Description": {"Consumer Deleted"}}})
		return
	}
	_ = a.b.nc.PublishMsg(&nats.Msg{Subject: jsAPI + "CONSUMER.MSG.NEXT." + stream + "." + name, Reply: r.m.Reply, Data: r.m.Data})
}

// consumerInfo is the server's raw answer to CONSUMER.INFO and the
// tenant the consumer was made for ("" for the fleet's own).
func (b *Bus) consumerInfo(ctx context.Context, stream, name string) (raw []byte, tenant string, found bool, err error) {
	if validToken(name) != nil {
		return nil, "", false, nil
	}
	resp, err := b.nc.RequestWithContext(ctx, jsAPI+"CONSUMER.INFO."+stream+"."+name, nil)
	if err != nil {
		return nil, "", false, fmt.Errorf("consumer info %s: %w", name, err)
	}
	var info struct {
		Error  *jetstream.APIError       `json:"error"`
		Config *jetstream.ConsumerConfig `json:"config"`
	}
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		return nil, "", false, fmt.Errorf("consumer info %s: %w", name, err)
	}
	if info.Error != nil {
		if info.Error.ErrorCode == jetstream.JSErrCodeConsumerNotFound {
			return nil, "", false, nil
		}
		return nil, "", false, fmt.Errorf("consumer info %s: %w", name, info.Error)
	}
	if info.Config == nil {
		return nil, "", false, fmt.Errorf("consumer info %s: empty answer", name)
	}
	return resp.Data, info.Config.Metadata[tenantMetaKey], true, nil
}

// TenantConsumers names the consumers on the events stream made for
// tenant through TenantAPI.
func (b *Bus) TenantConsumers(ctx context.Context, tenant string) ([]string, error) {
	infos, err := b.tenantConsumers(ctx, tenant)
	names := make([]string, 0, len(infos))
	for _, c := range infos {
		names = append(names, c.name)
	}
	return names, err
}

type tenantConsumer struct {
	name string
	raw  json.RawMessage // the server's consumer info
}

func (b *Bus) tenantConsumers(ctx context.Context, tenant string) ([]tenantConsumer, error) {
	if err := validToken(tenant); err != nil {
		return nil, fmt.Errorf("tenant consumers: %w", err)
	}
	ctx, cancel := b.apiCtx(ctx)
	defer cancel()
	stream := b.n.stream(streamEvents)
	var out []tenantConsumer
	for offset := 0; ; {
		req, _ := json.Marshal(map[string]int{"offset": offset})
		resp, err := b.nc.RequestWithContext(ctx, jsAPI+"CONSUMER.LIST."+stream, req)
		if err != nil {
			return nil, opErr(ctx, fmt.Errorf("tenant consumers of %s: %w", tenant, err))
		}
		var page struct {
			Error     *jetstream.APIError `json:"error"`
			Total     int                 `json:"total"`
			Consumers []json.RawMessage   `json:"consumers"`
		}
		if err := json.Unmarshal(resp.Data, &page); err != nil {
			return nil, fmt.Errorf("tenant consumers of %s: %w", tenant, err)
		}
		if page.Error != nil {
			return nil, fmt.Errorf("tenant consumers of %s: %w", tenant, page.Error)
		}
		for _, raw := range page.Consumers {
			var c struct {
				Name   string `json:"name"`
				Config struct {
					Metadata map[string]string `json:"metadata"`
				} `json:"config"`
			}
			if json.Unmarshal(raw, &c) == nil && c.Config.Metadata[tenantMetaKey] == tenant {
				out = append(out, tenantConsumer{name: c.Name, raw: raw})
			}
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return out, nil
		}
	}
}

// DeleteTenantConsumers deletes every consumer made for tenant through
// TenantAPI (its creds were revoked) and returns how many it deleted.
func (b *Bus) DeleteTenantConsumers(ctx context.Context, tenant string) (int, error) {
	names, err := b.TenantConsumers(ctx, tenant)
	if err != nil {
		return 0, err
	}
	ctx, cancel := b.apiCtx(ctx)
	defer cancel()
	stream := b.n.stream(streamEvents)
	n := 0
	var errs []error
	for _, name := range names {
		err := b.js.DeleteConsumer(ctx, stream, name)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("delete %s's consumers: %w", tenant, err)
	}
	return n, nil
}
