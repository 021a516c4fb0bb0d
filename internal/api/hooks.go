package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet/internal/group"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/ttlcache"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// The intake, POST /v1/hooks/{id}, takes no bearer token: the signature
// is the credential. It reads the body once, within the trigger's limit,
// verifies it over those exact bytes, filters the event, renders the
// templates, and admits a run through the same path as POST /v1/runs
// (admit) with the payload as its context. A sender's retry of a
// delivery is the same run: the run's idempotency key is the trigger and
// the delivery id, so the dedupe is as durable as the run. What it did
// is one line of the trigger's delivery log, written before it answers;
// concurrent deliveries share one store write (group.Queue).
//
// A found trigger, with its secrets opened and its templates parsed, is
// kept for Config.LookupCacheTTL: a trigger changed on another
// dispatcher (disabled, rotated) takes effect here within that time. An
// id that is no trigger is kept as unknown for Config.UnknownKeyTTL (and
// forgotten here when a trigger is made), so a stranger's guesses cost
// no store lookup each.
//
// What a stranger can send costs little and is logged sparingly: the
// checks that need no body (a known, enabled trigger; the signature
// headers present; a signed timestamp within the tolerance; a declared
// length within the limit) come before the body is read, and refusals
// (bad signature, stale timestamp, disabled trigger, body over the
// limit) are logged at most refusalsPerMinute a minute per trigger, the
// rest only counted, so they cannot flush the log of the deliveries
// that count.
//
// GitHub signs the body but not its delivery id, so a captured body
// could be replayed under new ids: a GitHub delivery also claims its
// body's SHA-256 for Config.HookDigestWindow (store.TriggerDigestClaim),
// and a body claimed by an earlier delivery is admitted under that
// delivery's idempotency key, which finds its run.

// Bounds of what a delivery log line keeps of an unverified request.
const (
	maxLoggedHeaders  = 30
	maxReasonLen      = 1024
	maxKeptPayload    = 1 << 20
	hookLogBatchMax   = 256
	hookTemplateLimit = maxMessageLen
	// refusalsPerMinute bounds the refused deliveries a trigger's log
	// takes per minute (per dispatcher).
	refusalsPerMinute = 60
)

// hookState is the intake's: cached triggers, the log writer, metrics.
type hookState struct {
	cache   *ttlcache.Cache[string, *hookTrigger]
	unknown *ttlcache.Cache[string, struct{}]
	log     group.Queue[*logCall]
	claims  group.Queue[*claimCall]
	keep    int
	window  time.Duration
	// refusals paces the log lines of refused deliveries.
	refusals refusalBudget
	// deliveries counts deliveries by scheme and outcome; seconds times
	// the intake from the request to its answer; unlogged counts the
	// refusals the log did not take.
	deliveries *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	unlogged   *prometheus.CounterVec
}

func (h *hookState) init(cfg Config) error {
	h.cache = ttlcache.New[string, *hookTrigger](cfg.LookupCacheTTL, lookupCacheMax)
	h.unknown = ttlcache.New[string, struct{}](cfg.UnknownKeyTTL, lookupCacheMax)
	h.keep, h.window = cfg.DeliveryLogKeep, cfg.HookDigestWindow
	h.unlogged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_webhook_refusals_unlogged_total",
		Help: "Refused webhook deliveries (bad signature, stale timestamp, disabled trigger, body over the limit) left out of the delivery log because their trigger had logged 60 refusals that minute, by scheme.",
	}, []string{"scheme"})
	h.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_webhook_deliveries_total",
		Help: "Webhook deliveries the intake answered, by scheme and outcome (accepted, duplicate, ignored, rejected, failed).",
	}, []string{"scheme", "outcome"})
	h.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentfleet_webhook_intake_seconds",
		Help:    "Time from a webhook delivery's arrival to the intake's answer, by scheme.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5},
	}, []string{"scheme"})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{h.deliveries, h.seconds, h.unlogged} {
			if err := cfg.Registerer.Register(c); err != nil {
				return fmt.Errorf("api: register webhook metrics: %w", err)
			}
		}
	}
	return nil
}

// hookTrigger is a trigger ready for deliveries.
type hookTrigger struct {
	store.Trigger
	// secrets are the opened secret and, until prevUntil, the previous.
	secrets   []string
	prevUntil time.Time
	message   *webhook.Template
	session   *webhook.Template
}

// secretsAt are the secrets a delivery at now may be signed with.
func (t *hookTrigger) secretsAt(now time.Time) []string {
	if len(t.secrets) > 1 && !now.Before(t.prevUntil) {
		return t.secrets[:1]
	}
	return t.secrets
}

// forget drops a cached trigger, after a change made here (a trigger
// just made is no longer unknown).
func (h *hookState) forget(id string) {
	h.cache.Put(id, nil)
	h.unknown.Delete(id)
}

// trigger returns the trigger id ready for deliveries, enabled or not.
func (h *hookState) trigger(ctx context.Context, s *Server, id string) (*hookTrigger, error) {
	if ht, ok := h.cache.Get(id); ok && ht != nil {
		return ht, nil
	}
	if !validID(id) {
		return nil, errNotFound("no such trigger (a trigger id is letters, digits and '-', up to 64)")
	}
	if _, ok := h.unknown.Get(id); ok {
		return nil, errNotFound("no trigger %q", id)
	}
	t, err := s.cfg.Store.TriggerGetByID(ctx, store.TriggerGetByIDParams{ID: id})
	if errors.Is(err, store.ErrNotFound) {
		h.unknown.Put(id, struct{}{})
		return nil, errNotFound("no trigger %q", id)
	}
	if err != nil {
		return nil, err
	}
	ht := &hookTrigger{Trigger: t, prevUntil: t.PrevSecretUntil}
	secret, err := s.cfg.Secrets.Open(t.Secret, t.ID)
	if err != nil {
		s.log.Error("open a trigger's secret", "trigger", t.ID, "err", err)
		return nil, &apiError{status: http.StatusServiceUnavailable, code: "unavailable",
			msg: "this dispatcher cannot open the trigger's secret: " + errNoSecretsKey + " (the key the trigger was made under)"}
	}
	ht.secrets = []string{secret}
	if t.PrevSecret != "" {
		if prev, err := s.cfg.Secrets.Open(t.PrevSecret, t.ID); err == nil {
			ht.secrets = append(ht.secrets, prev)
		}
	}
	if ht.message, err = webhook.ParseTemplate("message", t.Message); err != nil {
		return nil, fmt.Errorf("trigger %s: %w", t.ID, err)
	}
	if t.SessionID != "" {
		if ht.session, err = webhook.ParseTemplate("session_id", t.SessionID); err != nil {
			return nil, fmt.Errorf("trigger %s: %w", t.ID, err)
		}
	}
	h.cache.Put(id, ht)
	return ht, nil
}

// hookReply is what the intake answers, and what it logs.
type hookReply struct {
	status int
	answer wire.HookAnswer
	err    *apiError // for an error status
	line   store.TriggerDelivery
	// refused says the request was refused before it was found signed
	// (anyone can send it): its line is logged within the trigger's
	// refusal budget.
	refused bool
}

// refused is the answer to a request refused before its signature held.
func refused(ae *apiError, line store.TriggerDelivery) hookReply {
	line.Outcome = store.DeliveryRejected
	return hookReply{status: ae.status, err: ae, line: line, refused: true}
}

func (s *Server) handleHook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ht, err := s.hooks.trigger(r.Context(), s, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ht.Enabled {
		// Logged, so the user sees their sender knocking.
		s.answerHook(w, r, ht, refused(errNotFound("no enabled trigger %q", ht.ID).(*apiError),
			store.TriggerDelivery{Reason: "the trigger is disabled", Delivery: claimedDelivery(ht, r.Header)}))
		return
	}
	// What needs no body first: a stranger's unsigned or stale request
	// is refused unread.
	if err := webhook.Precheck(webhook.Scheme(ht.Scheme), r.Header, start); err != nil {
		s.answerHook(w, r, ht, badSignature(ht, r.Header, err))
		return
	}
	limit := hookBodyLimit(ht.Trigger)
	tooLarge := func() {
		ae := &apiError{status: http.StatusRequestEntityTooLarge, code: "payload_too_large",
			msg: fmt.Sprintf("the body exceeds the trigger's max_body_bytes (%d)", limit)}
		s.answerHook(w, r, ht, refused(ae, store.TriggerDelivery{Reason: ae.msg, Delivery: claimedDelivery(ht, r.Header)}))
	}
	if r.ContentLength > limit {
		tooLarge()
		return
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+1))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			s.fail(w, r, errBadRequest("read the body: %v", err))
			return
		}
		tooLarge()
		return
	}
	rep := s.intake(w, r, ht, r.Header, buf.Bytes(), start, true)
	s.answerHook(w, r, ht, rep)
	s.hooks.seconds.WithLabelValues(ht.Scheme).Observe(time.Since(start).Seconds())
}

// badSignature is the answer to a refused signature: one bounded line,
// no body and no dedupe record.
func badSignature(ht *hookTrigger, h http.Header, err error) hookReply {
	var se *webhook.SignatureError
	if !errors.As(err, &se) {
		return failed(store.TriggerDelivery{}, &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error"})
	}
	return refused(&apiError{status: http.StatusUnauthorized, code: "bad_signature", msg: "signature refused: " + se.Error()},
		store.TriggerDelivery{Delivery: claimedDelivery(ht, h), Reason: bound(se.Error() + " (headers: " + headerNames(h) + ")")})
}

// answerHook logs what the intake did, counts it, and answers.
func (s *Server) answerHook(w http.ResponseWriter, r *http.Request, ht *hookTrigger, rep hookReply) {
	rep.line.TriggerID = ht.ID
	s.hooks.deliveries.WithLabelValues(ht.Scheme, string(rep.line.Outcome)).Inc()
	if rep.refused && !s.hooks.refusals.allow(ht.ID, time.Now()) {
		s.hooks.unlogged.WithLabelValues(ht.Scheme).Inc()
	} else if err := s.recordDelivery(r.Context(), rep.line); err != nil {
		// The answer stands: the run (or its absence) is what counts.
		s.log.Warn("record a delivery in the log", "trigger", ht.ID, "delivery", rep.line.Delivery, "err", err)
	}
	if rep.err != nil {
		writeError(w, rep.err)
		return
	}
	writeJSON(w, rep.status, rep.answer)
}

// intake verifies, parses, filters and admits one delivery. dedupeBody
// says a GitHub delivery claims its body's digest (a test delivery,
// signed by the server for the tenant, does not).
func (s *Server) intake(w http.ResponseWriter, r *http.Request, ht *hookTrigger, h http.Header, body []byte, now time.Time, dedupeBody bool) hookReply {
	scheme := webhook.Scheme(ht.Scheme)
	if err := webhook.Verify(scheme, ht.secretsAt(now), h, body, now); err != nil {
		return badSignature(ht, h, err)
	}
	d, err := webhook.Parse(scheme, h, body)
	if err != nil {
		line := store.TriggerDelivery{Outcome: store.DeliveryFailed, Delivery: claimedDelivery(ht, h), Reason: bound(err.Error())}
		return failed(line, errBadRequest("%v", err).(*apiError))
	}
	line := store.TriggerDelivery{Delivery: d.ID, Event: d.Event, Action: d.Action}
	if scheme == webhook.GitHub && d.Event == "ping" {
		return ignored(line, d.ID, "ping: GitHub checks the hook; no run is started")
	}
	if !webhook.Match(ht.Events, d.Event, d.Action) {
		return ignored(line, d.ID, fmt.Sprintf("event %q is not among the trigger's events %v", webhook.EventName(d.Event, d.Action), ht.Events))
	}
	first := d.ID
	if scheme == webhook.GitHub && dedupeBody {
		sum := sha256.Sum256(body)
		var err error
		if first, err = s.claimDigest(r.Context(), store.DigestClaim{TriggerID: ht.ID, Digest: sum[:], Delivery: d.ID}); err != nil {
			return failed(line, s.apiErrorOf(r, fmt.Errorf("claim the body's digest: %w", err)))
		}
	}
	rep := s.admitDelivery(w, r, ht, d, line, hookKey(ht.ID, first))
	if first != d.ID && rep.line.Outcome == store.DeliveryDuplicate {
		rep.line.Reason = bound(fmt.Sprintf("the body of delivery %s again, under a new delivery id (a replay): its run, no new one", first))
	}
	return rep
}

// admitDelivery renders the templates and admits the delivery's run.
// key is the run's idempotency key ("" for a run of its own). A refusal
// for the tenant's max_queued_runs sets w's Retry-After.
func (s *Server) admitDelivery(w http.ResponseWriter, r *http.Request, ht *hookTrigger, d webhook.Delivery, line store.TriggerDelivery, key string) hookReply {
	data := webhook.Data{Payload: d.Data, Event: d.Event, Action: d.Action, Delivery: d.ID, Trigger: ht.Name}
	msg, err := ht.message.Execute(data, hookTemplateLimit, 0)
	if err == nil && strings.TrimSpace(msg) == "" {
		err = errors.New("message template rendered an empty message")
	}
	session := ""
	if err == nil && ht.session != nil {
		session, err = ht.session.Execute(data, hookTemplateLimit, 0)
		if err == nil && session != "" && !validID(session) {
			err = fmt.Errorf("session_id template rendered %q, not a session id (letters, digits, '-' and '_', up to 64): wrap it in slug", bound(session))
		}
	}
	if err != nil {
		// Not deduped: a retry after the template is fixed goes through.
		line.Outcome, line.Reason = store.DeliveryFailed, bound(err.Error())
		return failed(line, errUnprocessable("%v", err).(*apiError))
	}
	params, err := validateRunCreate(ht.Tenant, wire.RunCreateRequest{
		Agent: ht.Agent, Message: msg, SessionID: session, IdempotencyKey: key,
		Metadata: map[string]string{"trigger": ht.ID, "delivery": d.ID, "event": webhook.EventName(d.Event, d.Action)},
		MaxTurns: ht.MaxTurns, MaxTokens: ht.MaxTokens,
	})
	// The payload was parsed already: no second pass to validate it.
	params.Context = d.Payload
	if err == nil {
		queued, _ := json.Marshal(map[string]string{"trigger": ht.ID, "delivery": d.ID, "event": webhook.EventName(d.Event, d.Action)})
		var res store.RunCreateResult
		if res, err = s.admit(r.Context(), params, admission{queuedArgs: queued, callbackURL: ht.CallbackURL}); err == nil {
			line.RunID = res.Run.ID
			status, outcome := http.StatusAccepted, store.DeliveryAccepted
			if !res.Created {
				status, outcome = http.StatusOK, store.DeliveryDuplicate
			}
			line.Outcome = outcome
			return hookReply{status: status, line: line, answer: wire.HookAnswer{Delivery: d.ID, RunID: res.Run.ID}}
		}
	}
	ae := s.apiErrorOf(r, tooManyRuns(w, err))
	line.Reason = bound(ae.msg)
	if errors.Is(err, store.ErrUnknownAgent) {
		// Not the sender's fault, and no retry of it can help.
		line.Outcome = store.DeliveryRejected
		line.Reason = bound(fmt.Sprintf("the trigger's agent %q does not exist (deleted?): define it again, or point the trigger at another agent", ht.Agent))
		return failed(line, ae)
	}
	if ae.status == http.StatusTooManyRequests {
		// The tenant has no room: the sender (GitHub) will not retry,
		// so the payload is kept for a redelivery from the log.
		line.Outcome = store.DeliveryRejected
		if len(d.Payload) <= maxKeptPayload {
			line.Payload = d.Payload
		}
		return failed(line, ae)
	}
	line.Outcome = store.DeliveryFailed
	return failed(line, ae)
}

func failed(line store.TriggerDelivery, ae *apiError) hookReply {
	if line.Outcome == "" {
		line.Outcome = store.DeliveryFailed
		line.Reason = bound(ae.msg)
	}
	return hookReply{status: ae.status, err: ae, line: line}
}

func ignored(line store.TriggerDelivery, delivery, why string) hookReply {
	line.Outcome, line.Reason = store.DeliveryIgnored, why
	return hookReply{status: http.StatusOK, line: line, answer: wire.HookAnswer{Delivery: delivery, Ignored: why}}
}

// hookKey is the idempotency key of a delivery's run, within 200 bytes.
func hookKey(trigger, delivery string) string {
	k := "hook:" + trigger + ":" + delivery
	if len(k) <= 200 {
		return k
	}
	sum := sha256.Sum256([]byte(delivery))
	return "hook:" + trigger + ":sha256:" + hex.EncodeToString(sum[:])
}

// claimedDelivery is the delivery id an unverified request claims, as
// the log shows it; a stripe delivery's id is in the body, unread.
func claimedDelivery(ht *hookTrigger, h http.Header) string {
	var v string
	switch webhook.Scheme(ht.Scheme) {
	case webhook.GitHub:
		v = h.Get(webhook.HeaderGitHubDelivery)
	case webhook.Standard:
		v = h.Get(webhook.HeaderStandardID)
	case webhook.HMAC:
		v = h.Get(webhook.HeaderHMACDelivery)
	}
	if len(v) > webhook.MaxDeliveryIDLen {
		v = v[:webhook.MaxDeliveryIDLen]
	}
	return strings.ToValidUTF8(v, "?")
}

// headerNames lists the request's header names, sorted and bounded.
func headerNames(h http.Header) string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	if len(names) > maxLoggedHeaders {
		names = append(names[:maxLoggedHeaders], "…")
	}
	return strings.Join(names, ", ")
}

func bound(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxReasonLen], "") + "…"
}

// handleRedeliver starts a new run from a logged delivery: an accepted
// one's payload is its run's context; a rejected one (no room) kept its
// payload, and its redelivery keeps its dedupe key, so a sender's later
// retry of it finds this run.
func (s *Server) handleRedeliver(w http.ResponseWriter, r *http.Request, p principal) {
	t, err := s.lookupTrigger(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	delivery := r.PathValue("delivery")
	res, err := s.cfg.Store.TriggerDeliveryList(r.Context(), store.TriggerDeliveryListParams{TriggerID: t.ID, Delivery: delivery, Limit: listLimitMax})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(res.Deliveries) == 0 {
		s.fail(w, r, errNotFound("no delivery %q in trigger %s's log (it keeps the last %d)", delivery, t.ID, cmp.Or(s.hooks.keep, 1000)))
		return
	}
	s.hooks.unknown.Delete(t.ID) // found: made on another dispatcher since
	ht, err := s.hooks.trigger(r.Context(), s, t.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, l := range res.Deliveries {
		d := webhook.Delivery{ID: l.Delivery, Event: l.Event, Action: l.Action}
		key := ""
		switch {
		case l.Outcome == store.DeliveryRejected && l.Payload != nil:
			d.Payload, key = l.Payload, hookKey(t.ID, l.Delivery)
		case (l.Outcome == store.DeliveryAccepted || l.Outcome == store.DeliveryDuplicate) && l.RunID != "":
			run, err := s.cfg.Store.RunGetByID(r.Context(), store.RunGetByIDParams{ID: l.RunID, Tenant: p.tenant})
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted since (retention): another line may do
			}
			if err != nil {
				s.fail(w, r, err)
				return
			}
			d.Payload = run.Context
		default:
			continue
		}
		if d.Data, err = webhook.DecodePayload(d.Payload); err != nil {
			s.fail(w, r, fmt.Errorf("decode the payload of delivery %s: %w", l.Delivery, err))
			return
		}
		line := store.TriggerDelivery{Delivery: l.Delivery, Event: l.Event, Action: l.Action}
		rep := s.admitDelivery(w, r, ht, d, line, key)
		if rep.err == nil {
			rep.line.Reason = "redelivered from the log"
		}
		s.answerHook(w, r, ht, rep)
		return
	}
	s.fail(w, r, errConflict("delivery %q started no run whose payload is still here (only accepted deliveries, and those rejected for want of room, can be redelivered)", delivery))
}
