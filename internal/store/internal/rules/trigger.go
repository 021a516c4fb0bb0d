package rules

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Defaults of the trigger methods.
const (
	TriggerListLimitDefault = 50
	TriggerListLimitMax     = 500
	// DeliveryKeepDefault is how many log lines a trigger keeps.
	DeliveryKeepDefault = 1000
)

// TriggerCreate validates p and fills its id and agent.
func TriggerCreate(p store.TriggerCreateParams) (store.TriggerCreateParams, error) {
	if p.ID == "" {
		p.ID = NewID()
	} else if err := CheckID("trigger id", p.ID); err != nil {
		return p, err
	}
	if p.Tenant == "" || p.Scheme == "" || p.Secret == "" {
		return p, Invalidf("trigger: tenant, scheme and secret are required")
	}
	if p.Agent == "" {
		p.Agent = agentfleet.DefaultAgent
	}
	if p.MaxTurns < 0 || p.MaxTokens < 0 || p.MaxBodyBytes < 0 {
		return p, Invalidf("trigger %s: caps must not be negative (zero: the defaults)", p.ID)
	}
	if err := checkTexts("trigger name", p.Name, "trigger agent", p.Agent, "trigger scheme", p.Scheme, "trigger message", p.Message,
		"trigger session_id", p.SessionID, "trigger secret", p.Secret, "trigger callback_url", p.CallbackURL); err != nil {
		return p, err
	}
	return p, checkEvents(p.Events)
}

func checkEvents(events []string) error {
	for _, e := range events {
		if err := CheckText("trigger events entry", e); err != nil {
			return err
		}
	}
	return nil
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TriggerUpdate validates p.
func TriggerUpdate(p store.TriggerUpdateParams) error {
	switch {
	case p.ID == "" || p.Tenant == "":
		return Invalidf("trigger update: id and tenant are required")
	case p.MaxTurns != nil && *p.MaxTurns < 0, p.MaxTokens != nil && *p.MaxTokens < 0, p.MaxBodyBytes != nil && *p.MaxBodyBytes < 0:
		return Invalidf("trigger %s: caps must not be negative (zero: the defaults)", p.ID)
	case p.Secret != nil && *p.Secret == "":
		return Invalidf("trigger %s: a new secret must not be empty", p.ID)
	case p.Agent != nil && *p.Agent == "":
		return Invalidf("trigger %s: agent must not be empty", p.ID)
	}
	if err := checkTexts("trigger name", deref(p.Name), "trigger agent", deref(p.Agent), "trigger message", deref(p.Message),
		"trigger session_id", deref(p.SessionID), "trigger secret", deref(p.Secret), "trigger callback_url", deref(p.CallbackURL)); err != nil {
		return err
	}
	if p.Events != nil {
		return checkEvents(*p.Events)
	}
	return nil
}

// TriggerListLimit is the page size of a listing asking for limit.
func TriggerListLimit(limit int) (int, error) {
	if limit < 0 || limit > TriggerListLimitMax {
		return 0, Invalidf("limit %d: use 1 to %d (zero: %d)", limit, TriggerListLimitMax, TriggerListLimitDefault)
	}
	if limit == 0 {
		return TriggerListLimitDefault, nil
	}
	return limit, nil
}

// TriggerDeliveryRecord validates p and fills its defaults: ids, times,
// Keep.
func TriggerDeliveryRecord(p store.TriggerDeliveryRecordParams) (store.TriggerDeliveryRecordParams, error) {
	if p.Keep < 0 {
		return p, Invalidf("delivery log: keep must not be negative (zero: %d)", DeliveryKeepDefault)
	}
	if p.Keep == 0 {
		p.Keep = DeliveryKeepDefault
	}
	lines := make([]store.TriggerDelivery, len(p.Lines))
	for i, l := range p.Lines {
		switch l.Outcome {
		case store.DeliveryAccepted, store.DeliveryDuplicate, store.DeliveryIgnored, store.DeliveryRejected, store.DeliveryFailed:
		default:
			return p, Invalidf("delivery outcome %q: use accepted, duplicate, ignored, rejected or failed", l.Outcome)
		}
		if l.TriggerID == "" {
			return p, Invalidf("delivery: trigger id is required")
		}
		if err := CheckJSON("delivery payload", l.Payload); err != nil {
			return p, err
		}
		// What a sender sent, signed or not, is logged cleaned: a log
		// line is never refused for its text.
		l.Delivery, l.Event, l.Action, l.Reason = Clean(l.Delivery), Clean(l.Event), Clean(l.Action), Clean(l.Reason)
		l.ID, l.ReceivedAt, l.Payload = NewID(), NowOr(l.ReceivedAt), CleanJSON(NullJSON(l.Payload))
		lines[i] = l
	}
	p.Lines = lines
	return p, nil
}

// TriggerDigestClaim validates p and fills its defaults: At, Window.
// Claims keeps one claim per trigger and digest, the first (a
// statement may not claim one row twice), sorted by trigger and digest
// (so concurrent calls lock rows in one order); Of maps each of p's
// claims to its entry in Claims.
func TriggerDigestClaim(p store.TriggerDigestClaimParams) (DigestClaims, error) {
	var dc DigestClaims
	switch {
	case p.Window < 0:
		return dc, Invalidf("digest claim: window must not be negative (zero: %s)", store.TriggerDigestWindowDefault)
	case p.Window == 0:
		p.Window = store.TriggerDigestWindowDefault
	}
	dc.At = NowOr(p.At)
	dc.Cutoff = dc.At.Add(-p.Window)
	type key struct{ trigger, digest string }
	first := map[key]int{}
	for _, c := range p.Claims {
		if c.TriggerID == "" || len(c.Digest) != 32 {
			return dc, Invalidf("digest claim: a trigger id and a 32-byte SHA-256 digest are required")
		}
		k := key{c.TriggerID, string(c.Digest)}
		if _, ok := first[k]; !ok {
			first[k] = len(dc.Claims)
			c.Delivery = Clean(c.Delivery)
			dc.Claims = append(dc.Claims, c)
		}
	}
	order := make([]int, len(dc.Claims))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ca, cb := dc.Claims[a], dc.Claims[b]
		return cmp.Or(strings.Compare(ca.TriggerID, cb.TriggerID), strings.Compare(string(ca.Digest), string(cb.Digest)))
	})
	at := make([]int, len(order))
	sorted := make([]store.DigestClaim, len(order))
	for to, from := range order {
		sorted[to], at[from] = dc.Claims[from], to
	}
	dc.Claims = sorted
	for _, c := range p.Claims {
		dc.Of = append(dc.Of, at[first[key{c.TriggerID, string(c.Digest)}]])
	}
	return dc, nil
}

// DigestClaims is a validated TriggerDigestClaim call.
type DigestClaims struct {
	Claims []store.DigestClaim
	Of     []int
	// At is the claims' time; a claim held since Cutoff or before has
	// lapsed.
	At, Cutoff time.Time
}

// Holders maps the holders of Claims (holders[i] of Claims[i]) back to
// the caller's claims.
func (dc DigestClaims) Holders(holders []string) []string {
	out := make([]string, len(dc.Of))
	for i, k := range dc.Of {
		out[i] = holders[k]
	}
	return out
}

// Triggers lists the distinct triggers of Claims, sorted.
func (dc DigestClaims) Triggers() []string {
	var ids []string
	for _, c := range dc.Claims {
		if len(ids) == 0 || ids[len(ids)-1] != c.TriggerID {
			ids = append(ids, c.TriggerID)
		}
	}
	return ids
}

// DeliveryTriggers lists the distinct triggers of lines, sorted: the
// order their locks are taken in.
func DeliveryTriggers(lines []store.TriggerDelivery) []string {
	var ids []string
	for _, l := range lines {
		ids = append(ids, l.TriggerID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Trigger listings are ordered by id (time-ordered UUIDv7), delivery
// logs by (n, id): n counts a trigger's deliveries. Their cursors are
// base64 of that position.

// EncodeTriggerCursor continues a trigger listing after id.
func EncodeTriggerCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("t" + id))
}

// DecodeTriggerCursor returns the id a trigger cursor continues after.
func DecodeTriggerCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) < 2 || raw[0] != 't' {
		return "", Invalidf("cursor %q is malformed: pass the next_cursor of the previous page", cursor)
	}
	return string(raw[1:]), nil
}

// EncodeDeliveryCursor continues a delivery listing after (n, id).
func EncodeDeliveryCursor(n int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("d" + strconv.FormatInt(n, 10) + ":" + id))
}

// DecodeDeliveryCursor returns the position a delivery cursor continues
// after.
func DecodeDeliveryCursor(cursor string) (int64, string, error) {
	bad := Invalidf("cursor %q is malformed: pass the next_cursor of the previous page", cursor)
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) < 2 || raw[0] != 'd' {
		return 0, "", bad
	}
	ns, id, ok := strings.Cut(string(raw[1:]), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", bad
	}
	return n, id, nil
}

// TriggerPage is a listing's page from the limit+1 triggers read.
func TriggerPage(ts []store.Trigger, limit int) store.TriggerListResult {
	res := store.TriggerListResult{Triggers: ts}
	if len(ts) > limit {
		res.Triggers = ts[:limit]
		res.NextCursor = EncodeTriggerCursor(ts[limit-1].ID)
	}
	return res
}

// DeliveryRow is a delivery log line as read, with its number.
type DeliveryRow = driver.DeliveryRow

// DeliveryPage is a listing's page from the limit+1 lines read.
func DeliveryPage(rows []DeliveryRow, limit int) store.TriggerDeliveryListResult {
	var res store.TriggerDeliveryListResult
	for i, r := range rows {
		if i == limit {
			res.NextCursor = EncodeDeliveryCursor(rows[limit-1].N, rows[limit-1].Line.ID)
			break
		}
		res.Deliveries = append(res.Deliveries, r.Line)
	}
	return res
}

func (s *Store) TriggerCreate(ctx context.Context, p store.TriggerCreateParams) (store.Trigger, error) {
	p, err := TriggerCreate(p)
	if err != nil {
		return store.Trigger{}, err
	}
	t, err := s.d.TriggerInsert(ctx, p, Now())
	if err != nil {
		return store.Trigger{}, fmt.Errorf("create trigger for %s: %w", p.Tenant, err)
	}
	return t, nil
}

func (s *Store) TriggerGetByID(ctx context.Context, p store.TriggerGetByIDParams) (store.Trigger, error) {
	t, err := s.d.TriggerGet(ctx, p.ID, p.Tenant)
	if err != nil {
		return store.Trigger{}, fmt.Errorf("get trigger %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TriggerList(ctx context.Context, p store.TriggerListParams) (store.TriggerListResult, error) {
	limit, err := TriggerListLimit(p.Limit)
	if err != nil {
		return store.TriggerListResult{}, err
	}
	after := ""
	if p.Cursor != "" {
		if after, err = DecodeTriggerCursor(p.Cursor); err != nil {
			return store.TriggerListResult{}, err
		}
	}
	ts, err := s.d.TriggerList(ctx, p.Tenant, after, limit+1)
	if err != nil {
		return store.TriggerListResult{}, fmt.Errorf("list triggers of %s: %w", p.Tenant, err)
	}
	return TriggerPage(ts, limit), nil
}

func (s *Store) TriggerUpdate(ctx context.Context, p store.TriggerUpdateParams) (store.Trigger, error) {
	if err := TriggerUpdate(p); err != nil {
		return store.Trigger{}, err
	}
	t, err := s.d.TriggerUpdate(ctx, p, Time(p.PrevSecretUntil), Now())
	if err != nil {
		return store.Trigger{}, fmt.Errorf("update trigger %s: %w", p.ID, err)
	}
	return t, nil
}

func (s *Store) TriggerDelete(ctx context.Context, p store.TriggerDeleteParams) error {
	ok, err := s.d.TriggerDelete(ctx, p.Tenant, p.ID)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete trigger %s: %w", p.ID, err)
	}
	return nil
}

func (s *Store) TriggerDeliveryRecord(ctx context.Context, p store.TriggerDeliveryRecordParams) ([]store.TriggerDelivery, error) {
	p, err := TriggerDeliveryRecord(p)
	if err != nil || len(p.Lines) == 0 {
		return nil, err
	}
	got, err := s.d.TriggerDeliveryInsert(ctx, p.Lines, p.Keep)
	if err != nil {
		return nil, fmt.Errorf("record %d deliveries: %w", len(p.Lines), err)
	}
	return got, nil
}

func (s *Store) TriggerDeliveryList(ctx context.Context, p store.TriggerDeliveryListParams) (store.TriggerDeliveryListResult, error) {
	limit, err := TriggerListLimit(p.Limit)
	if err != nil {
		return store.TriggerDeliveryListResult{}, err
	}
	afterN, afterID := int64(-1), ""
	if p.Cursor != "" {
		if afterN, afterID, err = DecodeDeliveryCursor(p.Cursor); err != nil {
			return store.TriggerDeliveryListResult{}, err
		}
	}
	rows, err := s.d.TriggerDeliveryList(ctx, driver.TriggerDeliveryListParams{
		TriggerID: p.TriggerID, Delivery: p.Delivery, AfterN: afterN, AfterID: afterID, Limit: limit + 1,
	})
	if err != nil {
		return store.TriggerDeliveryListResult{}, fmt.Errorf("list deliveries of trigger %s: %w", p.TriggerID, err)
	}
	return DeliveryPage(rows, limit), nil
}

func (s *Store) TriggerDigestClaim(ctx context.Context, p store.TriggerDigestClaimParams) ([]string, error) {
	dc, err := TriggerDigestClaim(p)
	if err != nil || len(dc.Claims) == 0 {
		return nil, err
	}
	holders, err := s.d.TriggerDigestUpsert(ctx, dc.Triggers(), dc.Claims, dc.At, dc.Cutoff)
	if err != nil {
		return nil, fmt.Errorf("claim %d body digests: %w", len(dc.Claims), err)
	}
	return dc.Holders(holders), nil
}
