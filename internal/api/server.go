// Package api is the dispatcher's HTTP API (docs/api.md lists it): run
// submission, reads, listing, cancellation, events as Server-Sent Events
// (a run's, or every run's of a tenant: console.go), tenant
// administration and health; it mounts the web console (internal/console)
// when given one. It admits runs and publishes their first turn
// (internal/outbox); it never calls a model, and it runs nothing in the
// background: the sweeps and the callback sender are internal/maintain's.
//
// Every endpoint but the health checks authenticates with a bearer token:
// the admin token (AGENTFLEET_ADMIN_TOKEN) or a tenant's API key. A tenant
// key sees only its own tenant: another tenant's run is 404, not 403, so
// ids do not leak. Errors are {"error":{"code","message"}} with the status
// mapped in one place (writeError). The health checks answer fixed bodies
// that name no tenant and no cause (ready.go); the metrics, which name
// every tenant, are not served here but on the dispatcher's own metrics
// listener (internal/fleet).
//
// A found API key's tenant and a found agent are kept for a few seconds
// (Config.LookupCacheTTL), so a run submission costs the store one round
// trip, the insert, instead of three; a revoked key is dropped from every
// dispatcher's cache at once (lookup.go).
package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	MaxBodyBytesDefault = 1 << 20
	sseKeepAlive        = 15 * time.Second
	sseStorePoll        = 2 * time.Second
	publishTimeout      = 10 * time.Second
)

// Config configures the API server.
type Config struct {
	Store store.Store
	Bus   *bus.Bus
	// Tracer traces admissions and the runs the dispatcher ends
	// (internal/telemetry); nil traces nothing.
	Tracer Tracer
	// AdminToken authorises tenant administration. Empty disables the
	// admin endpoints (every admin request is 401).
	AdminToken string
	// MaxBodyBytes caps request bodies (413 beyond it).
	MaxBodyBytes int64
	// Registerer, when set, receives the API's own metrics.
	Registerer prometheus.Registerer
	// TenantChanged is called after a tenant's settings change, so
	// parked runs can be woken at once.
	TenantChanged func(tenant string)
	// LookupCacheTTL is how long the server keeps a found API key's
	// tenant and the fact that a tenant's agent exists, which saves a
	// run submission two of its three store round trips. Zero selects
	// LookupCacheTTLDefault; negative turns the caches off. A key
	// revoked on another dispatcher whose broadcast this one missed is
	// accepted for up to this long (lookup.go).
	LookupCacheTTL time.Duration
	// UnknownKeyTTL is how long a bearer token that is no key is
	// refused without asking the store again. Zero selects
	// UnknownKeyTTLDefault; negative asks every time.
	UnknownKeyTTL time.Duration
	// KeyRevocations, when set, tells the other dispatchers of the
	// fleet about keys revoked here and this one about theirs; nil
	// (one dispatcher) drops only this server's cache entries.
	KeyRevocations KeyRevocations
	Logger         *slog.Logger
	// Webhook triggers: Secrets seals their secrets at rest (nil: no
	// AGENTFLEET_SECRETS_KEY, and creating a trigger is refused);
	// PublicURL, when set, makes their hook URLs absolute
	// (AGENTFLEET_PUBLIC_URL); DeliveryLogKeep is how many delivery log
	// lines each keeps (zero: 1,000).
	Secrets         *secrets.Box
	PublicURL       string
	DeliveryLogKeep int
	// Egress is the network guard run callbacks dial through
	// (AGENTFLEET_EGRESS_ALLOW): a callback_url it refuses is refused at
	// submission.
	Egress egress.Config
	// RequeueWithin, when set, says how soon the dispatcher's stranded
	// sweep queues a run recorded but not queued (zero: no sweep runs),
	// for the 503 of such a submission (maintain.Stranded.Within).
	RequeueWithin func() time.Duration
	// Console, when set, serves the web console at / and its assets
	// under /console/ (internal/console).
	Console http.Handler
	// RunsDeleted, when set, counts the runs DELETE /v1/runs/{id} and
	// DELETE /v1/sessions/{id} deleted.
	RunsDeleted prometheus.Counter
	// BatchMaxBytes caps the body of POST /v1/batches
	// (AGENTFLEET_BATCH_MAX_BYTES; zero: BatchMaxBytesDefault).
	BatchMaxBytes int64
	// NATSCreds, when set, serves /v1/tenants/{id}/nats-creds.
	NATSCreds NATSCreds
	// FleetSamples, when set, serves GET /v1/fleet/stats (stats.go);
	// unset, it answers no samples.
	FleetSamples FleetSampler

	// HookDigestWindow is how long a GitHub delivery's body digest is
	// held against its replay under another delivery id (zero:
	// store.TriggerDigestWindowDefault).
	HookDigestWindow time.Duration
	// TenantStreams caps each tenant's concurrent event streams and
	// ?wait polls (AGENTFLEET_TENANT_STREAMS; zero: TenantStreamsDefault).
	TenantStreams int
	// ReadTimeout, WriteTimeout and IdleTimeout are HTTPServer's (zero:
	// ReadTimeoutDefault, WriteTimeoutDefault, IdleTimeoutDefault). A
	// stream's writes each get WriteTimeout of their own (streams.go).
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// Server serves the API.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *routeMux
	// http times the requests (httpmetrics.go).
	http *httpMetrics

	// keys holds found and unknown API keys (lookup.go); agents holds
	// the agents known to exist (nil when caching is off).
	keys   *keyCache
	agents *ttlcache.Cache[agentKey, struct{}]
	// stopRevocations ends the subscription to Config.KeyRevocations.
	stopRevocations func()

	// outbox publishes what the API's store changes owe.
	outbox outbox.Outbox
	// readyLog paces the log lines of failing readiness checks.
	readyLog readyLog
	// hooks is the webhook intake's state (hooks.go), callbacks the
	// guard callback URLs are checked against (callbacks.go).
	hooks     hookState
	callbacks callbackState
	approvals approvalState
	// streams counts each tenant's open streams (streams.go).
	streams streamGate
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Bus == nil {
		return nil, errors.New("api: Config needs Store and Bus")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, errors.New("api: MaxBodyBytes must not be negative (zero selects 1 MiB)")
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noTracer{}
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = MaxBodyBytesDefault
	}
	if cfg.BatchMaxBytes <= 0 {
		cfg.BatchMaxBytes = BatchMaxBytesDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LookupCacheTTL == 0 {
		cfg.LookupCacheTTL = LookupCacheTTLDefault
	}
	if cfg.UnknownKeyTTL == 0 {
		cfg.UnknownKeyTTL = UnknownKeyTTLDefault
	}
	if err := cfg.streamDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, mux: &routeMux{ServeMux: http.NewServeMux()},
		keys:   newKeyCache(cfg.LookupCacheTTL, cfg.UnknownKeyTTL),
		agents: ttlcache.New[agentKey, struct{}](cfg.LookupCacheTTL, lookupCacheMax),
	}
	s.outbox = outbox.Outbox{Bus: cfg.Bus, Store: cfg.Store, Log: cfg.Logger, Timeout: publishTimeout}
	var err error
	if s.http, err = newHTTPMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	if err := s.hooks.init(cfg); err != nil {
		return nil, err
	}
	s.callbacks.init(cfg)
	if err := s.approvals.init(cfg); err != nil {
		return nil, err
	}
	s.routes()
	if cfg.KeyRevocations != nil {
		stop, err := cfg.KeyRevocations.SubscribeKeyRevoked(s.keyRevoked)
		if err != nil {
			return nil, fmt.Errorf("api: subscribe to key revocations: %w", err)
		}
		s.stopRevocations = stop
	}
	return s, nil
}

// Close stops what New started (the key revocation subscription). The
// caller shuts its HTTP server down first.
func (s *Server) Close() {
	if s.stopRevocations != nil {
		s.stopRevocations()
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.http.serve(s.mux, w, r) }

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/runs", s.tenantOnly(s.handleRunCreate))
	s.mux.HandleFunc("GET /v1/runs", s.authed(s.handleRunList))
	s.mux.HandleFunc("GET /v1/runs/{id}", s.authed(s.handleRunGet))
	s.mux.HandleFunc("GET /v1/runs/{id}/events", s.authed(s.stream(always, s.handleRunEvents)))
	s.mux.HandleFunc("GET /v1/runs/{id}/steps", s.authed(s.handleRunSteps))
	s.mux.HandleFunc("POST /v1/runs/{id}/cancel", s.authed(s.handleRunCancel))
	s.mux.HandleFunc("DELETE /v1/runs/{id}", s.authed(s.handleRunDelete))
	s.mux.HandleFunc("POST /v1/tenants", s.adminOnly(s.handleTenantCreate))
	s.mux.HandleFunc("GET /v1/tenants/{id}", s.authed(s.handleTenantGet))
	s.mux.HandleFunc("PUT /v1/tenants/{id}", s.adminOnly(s.handleTenantUpdate))
	s.mux.HandleFunc("GET /v1/tenants/{id}/usage", s.authed(s.handleTenantUsage))
	// Webhook triggers (triggers.go) and their intake (hooks.go).
	s.mux.HandleFunc("POST /v1/triggers", s.authed(s.tenantTrigger(s.handleTriggerCreate)))
	s.mux.HandleFunc("GET /v1/triggers", s.authed(s.tenantTrigger(s.handleTriggerList)))
	s.mux.HandleFunc("GET /v1/triggers/{id}", s.authed(s.tenantTrigger(s.handleTriggerGet)))
	s.mux.HandleFunc("PATCH /v1/triggers/{id}", s.authed(s.tenantTrigger(s.handleTriggerUpdate)))
	s.mux.HandleFunc("DELETE /v1/triggers/{id}", s.authed(s.tenantTrigger(s.handleTriggerDelete)))
	s.mux.HandleFunc("GET /v1/triggers/{id}/deliveries", s.authed(s.tenantTrigger(s.handleDeliveryList)))
	s.mux.HandleFunc("POST /v1/triggers/{id}/deliveries/{delivery}/redeliver", s.authed(s.tenantTrigger(s.handleRedeliver)))
	s.mux.HandleFunc("POST /v1/triggers/{id}/test", s.authed(s.tenantTrigger(s.handleTriggerTest)))
	s.mux.HandleFunc("POST /v1/hooks/{id}", s.handleHook)
	// Batches (batches.go), with a body limit of their own.
	s.mux.HandleFunc("POST /v1/batches", s.longBody(s.authedBody(s.cfg.BatchMaxBytes, s.tenantOnlyHandler(s.handleBatchCreate))))
	s.mux.HandleFunc("GET /v1/batches", s.authed(s.handleBatchList))
	s.mux.HandleFunc("GET /v1/batches/{id}", s.authed(s.handleBatchGet))
	s.mux.HandleFunc("GET /v1/batches/{id}/results", s.authed(s.stream(waits, s.handleBatchResults)))
	s.mux.HandleFunc("POST /v1/batches/{id}/cancel", s.authed(s.handleBatchCancel))
	s.mux.HandleFunc("POST /v1/batches/{id}/retry", s.authed(s.handleBatchRetry))
	s.mux.HandleFunc("POST /v1/tenants/{id}/callback-secret", s.authed(s.handleCallbackSecretRotate))
	s.mux.HandleFunc("POST /v1/tenants/{id}/keys", s.authed(s.handleKeyCreate))
	s.mux.HandleFunc("GET /v1/tenants/{id}/keys", s.authed(s.handleKeyList))
	s.mux.HandleFunc("DELETE /v1/tenants/{id}/keys/{key}", s.authed(s.handleKeyRevoke))
	s.mux.HandleFunc("GET /v1/tenants/{id}/nats-creds", s.adminOnly(s.handleNATSCredsGet))
	s.mux.HandleFunc("DELETE /v1/tenants/{id}/nats-creds", s.adminOnly(s.handleNATSCredsRevoke))
	// Agents (agents.go).
	s.mux.HandleFunc("PUT /v1/agents/{name}", s.authedBody(max(s.cfg.MaxBodyBytes, agentMaxBodyBytes), s.tenantAgent(s.handleAgentPut)))
	s.mux.HandleFunc("GET /v1/agents", s.authed(s.tenantAgent(s.handleAgentList)))
	s.mux.HandleFunc("GET /v1/agents/{name}", s.authed(s.tenantAgent(s.handleAgentGet)))
	s.mux.HandleFunc("DELETE /v1/agents/{name}", s.authed(s.tenantAgent(s.handleAgentDelete)))
	// Secrets (secrets.go).
	s.mux.HandleFunc("PUT /v1/secrets/{name}", s.authed(s.withNamedTenant("secrets", s.handleSecretPut)))
	s.mux.HandleFunc("GET /v1/secrets", s.authed(s.withNamedTenant("secrets", s.handleSecretList)))
	s.mux.HandleFunc("GET /v1/secrets/{name}", s.authed(s.withNamedTenant("secrets", s.handleSecretGet)))
	s.mux.HandleFunc("DELETE /v1/secrets/{name}", s.authed(s.withNamedTenant("secrets", s.handleSecretDelete)))
	// A rekey walks every sealed value: the deadlines of a long body.
	s.mux.HandleFunc("POST /v1/secrets/rekey", s.longBody(s.adminOnly(s.handleSecretsRekey)))
	// Skills (skills.go).
	s.mux.HandleFunc("PUT /v1/skills/{name}", s.authedBody(max(s.cfg.MaxBodyBytes, skillMaxBodyBytes), s.withNamedTenant("skills", s.handleSkillPut)))
	s.mux.HandleFunc("GET /v1/skills", s.authed(s.withNamedTenant("skills", s.handleSkillList)))
	s.mux.HandleFunc("GET /v1/skills/{name}", s.authed(s.withNamedTenant("skills", s.handleSkillGet)))
	s.mux.HandleFunc("DELETE /v1/skills/{name}", s.authed(s.withNamedTenant("skills", s.handleSkillDelete)))
	s.mux.HandleFunc("POST /v1/runs/{id}/skill", s.authed(s.handleRunSkill))
	// Sessions (sessions.go).
	s.mux.HandleFunc("GET /v1/sessions", s.authed(s.withNamedTenant("sessions", s.handleSessionList)))
	s.mux.HandleFunc("GET /v1/sessions/{id}", s.authed(s.withNamedTenant("sessions", s.handleSessionGet)))
	s.mux.HandleFunc("DELETE /v1/sessions/{id}", s.authed(s.withNamedTenant("sessions", s.handleSessionDelete)))
	// Approvals (approvals.go).
	s.mux.HandleFunc("GET /v1/approvals", s.authed(s.handleApprovalList))
	s.mux.HandleFunc("GET /v1/approvals/{id}", s.authed(s.handleApprovalGet))
	s.mux.HandleFunc("POST /v1/approvals/{id}/approve", s.authed(s.handleApprovalApprove))
	s.mux.HandleFunc("POST /v1/approvals/{id}/deny", s.authed(s.handleApprovalDeny))
	// What the console reads, and the console itself when it is served.
	s.mux.HandleFunc("GET /v1/events", s.authed(s.stream(always, s.handleEvents)))
	s.mux.HandleFunc("GET /v1/tenants", s.authed(s.handleTenantList))
	s.registerStats()
	if s.cfg.Console != nil {
		s.mux.Handle("GET /{$}", s.cfg.Console)
		s.mux.Handle("GET /console/", s.cfg.Console)
	}
	s.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound("the API does not serve /metrics: the dispatcher serves them on AGENTFLEET_METRICS_LISTEN"))
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("GET /v1/openapi.json", s.handleOpenAPI)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}

// principal is who a request acts as: the admin, or one tenant.
type principal struct {
	admin  bool
	tenant string
	// key names the tenant's API key the request came with, scopes
	// what it may do (scopes.go).
	key    string
	scopes []string
}

// who names the principal in what it decides: "admin", or its key's
// name.
func (p principal) who() string {
	if p.admin {
		return "admin"
	}
	return p.key
}

// canSee reports whether the principal may see tenant's data.
func (p principal) canSee(tenant string) bool { return p.admin || p.tenant == tenant }

type handler func(w http.ResponseWriter, r *http.Request, p principal)

func (s *Server) authenticate(r *http.Request) (principal, error) {
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is Bearer.
	auth := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, errUnauthorized("missing bearer token: send Authorization: Bearer <api key>")
	}
	if s.cfg.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AdminToken)) == 1 {
		return principal{admin: true}, nil
	}
	key, err := s.keyByToken(r.Context(), token)
	if err != nil {
		return principal{}, err
	}
	return principal{tenant: key.tenant, key: key.keyName, scopes: key.scopes}, nil
}

func (s *Server) authed(h handler) http.HandlerFunc { return s.authedBody(s.cfg.MaxBodyBytes, h) }

// authedBody is authed with a body limit of limit bytes.
func (s *Server) authedBody(limit int64, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
		if err == nil {
			err = checkScope(r, p)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		h(w, r, p)
	}
}

func (s *Server) adminOnly(h handler) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, p principal) {
		if !p.admin {
			s.fail(w, r, &apiError{status: http.StatusForbidden, code: "forbidden", msg: "this endpoint needs the admin token"})
			return
		}
		h(w, r, p)
	})
}

func (s *Server) tenantOnly(h handler) http.HandlerFunc { return s.authed(s.tenantOnlyHandler(h)) }

// tenantOnlyHandler refuses the admin token: runs belong to a tenant.
func (s *Server) tenantOnlyHandler(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		if p.tenant == "" {
			s.fail(w, r, errUnprocessable("runs are submitted with a tenant's API key, not the admin token"))
			return
		}
		h(w, r, p)
	}
}

// apiError is an error with its HTTP mapping.
type apiError struct {
	status int
	code   string
	msg    string
	// cause, when set, is the sentinel a caller may branch on.
	cause error
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.cause }

func errBadRequest(format string, a ...any) error {
	return &apiError{status: http.StatusBadRequest, code: "bad_request", msg: fmt.Sprintf(format, a...)}
}
func errUnprocessable(format string, a ...any) error {
	return &apiError{status: http.StatusUnprocessableEntity, code: "unprocessable", msg: fmt.Sprintf(format, a...)}
}
func errNotFound(format string, a ...any) error {
	return &apiError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf(format, a...)}
}
func errConflict(format string, a ...any) error {
	return &apiError{status: http.StatusConflict, code: "conflict", msg: fmt.Sprintf(format, a...)}
}
func errUnauthorized(msg string) error {
	return &apiError{status: http.StatusUnauthorized, code: "unauthorized", msg: msg}
}

// fail writes err, logging what is not the client's fault.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, s.apiErrorOf(r, err))
}

// apiErrorOf maps err to its HTTP answer, logging what is not the
// client's fault.
func (s *Server) apiErrorOf(r *http.Request, err error) *apiError {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		err = &apiError{status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
			msg: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	case errors.Is(err, store.ErrNotFound):
		err = errNotFound("not found")
	case errors.Is(err, store.ErrConflict):
		err = errConflict("%v", err)
	case errors.Is(err, store.ErrInvalid):
		err = errUnprocessable("%v", err)
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		err = &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error"}
	}
	return err.(*apiError)
}

func writeError(w http.ResponseWriter, err error) {
	ae := err.(*apiError)
	if ae.code == "unauthorized" {
		// A 401 names the scheme it wants (RFC 9110 §11.6.1).
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentfleet"`)
	}
	writeJSON(w, ae.status, map[string]any{"error": map[string]string{"code": ae.code, "message": ae.msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// decodeBody decodes a JSON body strictly: unknown fields and trailing
// data are errors, so a typo in a field name is reported, not ignored.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var ute *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			return errBadRequest("request body is empty; send a JSON object")
		case errors.As(err, &ute) && ute.Field == "":
			return errBadRequest("request body must be a JSON object, not %s", ute.Value)
		case errors.As(err, &ute):
			return errBadRequest("%s", typeErrorMessage(reflect.TypeOf(v), ute))
		case errors.As(err, &se):
			return errBadRequest("malformed JSON at byte %d: %v", se.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errBadRequest("%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return errBadRequest("malformed JSON: %v", err)
	}
	// Only white space may follow. (dec.More would let a stray '}' or
	// ']' through: it reports whether a list or object goes on.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return errBadRequest("request body has data after the JSON object; send one object")
	}
	return nil
}

// typeErrorMessage says what a field must be. When the value that did not
// fit is an element of an object or array field, the error names the
// field and the element's type: say so, rather than that the field itself
// must be, e.g., a string.
func typeErrorMessage(target reflect.Type, ute *json.UnmarshalTypeError) string {
	want := jsonKind(ute.Type.Kind())
	if ute.Type == reflect.TypeFor[agentfleet.Duration]() {
		want = `a duration like "90s" or "24h"`
	}
	if ft := fieldType(target, ute.Field); ft != nil && ft != ute.Type {
		switch ft.Kind() {
		case reflect.Map:
			want = "an object whose values are each " + want
		case reflect.Slice, reflect.Array:
			want = "an array whose elements are each " + want
		}
	}
	return fmt.Sprintf("field %q must be %s, not %s", jsonPath(target, ute.Field), want, ute.Value)
}

// jsonPath is a dotted field path as the JSON reads it: without the
// names of embedded structs, whose fields encoding/json lifts into their
// parent (wire.AgentRequest's AgentSpec).
func jsonPath(t reflect.Type, path string) string {
	var out []string
	for _, name := range strings.Split(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		var next reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			if f, ok := t.FieldByName(name); ok && f.Anonymous {
				t = f.Type
				continue
			}
			next = fieldType(t, name)
		}
		out = append(out, name)
		t = next
	}
	return strings.Join(out, ".")
}

// fieldType is the Go type of the field at a dotted JSON path in t, or
// nil when the path does not lead to a struct field.
func fieldType(t reflect.Type, path string) reflect.Type {
	for _, name := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		var found reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == name || tag == "" && strings.EqualFold(f.Name, name) {
				found = f.Type
				break
			}
		}
		if found == nil {
			return nil
		}
		t = found
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// jsonKind names the JSON a Go kind decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	}
	return k.String()
}

// validID reports whether s may be a tenant, session or agent id: it
// appears in NATS subjects, so dots, wildcards and spaces are out.
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// requeueWithin is how soon the dispatcher's stranded sweep queues a run
// recorded but not queued; zero when none runs.
func (s *Server) requeueWithin() time.Duration {
	if s.cfg.RequeueWithin == nil {
		return 0
	}
	return s.cfg.RequeueWithin()
}
