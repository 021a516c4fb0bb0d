package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"unicode/utf8"
)

// Delivery is a verified delivery as a run sees it.
type Delivery struct {
	// ID is the sender's delivery id: a retry of the delivery has the
	// same one.
	ID string
	// Event is the delivery's event ("" when the sender names none);
	// Action is GitHub's payload action ("" for other schemes).
	Event  string
	Action string
	// Payload is the JSON the delivery carried (for a GitHub form post,
	// its payload field); Data is Payload decoded, numbers kept exact.
	Payload json.RawMessage
	Data    any
}

// FormatError is a correctly signed body that is not what the scheme's
// sender sends: not JSON, no delivery id where the scheme needs one.
type FormatError struct{ Msg string }

func (e *FormatError) Error() string { return e.Msg }

func formatErr(format string, a ...any) error { return &FormatError{Msg: fmt.Sprintf(format, a...)} }

// MaxDeliveryIDLen bounds a sender's delivery id.
const MaxDeliveryIDLen = 256

// Parse reads a verified delivery: its id, event and payload. Call it
// only after Verify: it trusts what it reads. A malformed body is a
// *FormatError.
func Parse(s Scheme, h http.Header, body []byte) (Delivery, error) {
	var d Delivery
	raw := body
	if s == GitHub && isForm(h.Get("Content-Type")) {
		// GitHub's "application/x-www-form-urlencoded" content type
		// sends the JSON in a payload field; the signature covers the
		// form as sent.
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return d, formatErr("the form-encoded body does not parse: %v", err)
		}
		if !vals.Has("payload") {
			return d, formatErr("the form-encoded body has no payload field")
		}
		raw = []byte(vals.Get("payload"))
	}
	data, err := DecodePayload(raw)
	switch {
	case err == nil:
		d.Payload = bytes.TrimSpace(raw)
	case s == HMAC && utf8.Valid(raw):
		// A generic sender may sign any text: the run gets it as a
		// JSON string.
		d.Payload, _ = json.Marshal(string(raw))
		data = string(raw)
	default:
		return d, formatErr("the body is not JSON: %v", err)
	}
	d.Data = data
	field := func(name string) string {
		if m, ok := data.(map[string]any); ok {
			if v, ok := m[name].(string); ok {
				return v
			}
		}
		return ""
	}
	switch s {
	case GitHub:
		d.ID, d.Event, d.Action = h.Get(HeaderGitHubDelivery), h.Get(HeaderGitHubEvent), field("action")
		if d.Event == "" {
			return d, formatErr("%s is missing: GitHub names every delivery's event", HeaderGitHubEvent)
		}
	case Standard:
		d.ID, d.Event = h.Get(HeaderStandardID), field("type")
	case Stripe:
		d.ID, d.Event = field("id"), field("type")
		if d.ID == "" {
			return d, formatErr("the Stripe event has no id")
		}
	case HMAC:
		d.ID, d.Event = h.Get(HeaderHMACDelivery), h.Get(HeaderHMACEvent)
		if d.Event == "" {
			d.Event = field("type")
		}
	}
	if d.ID == "" {
		// No id from the sender: the body's digest, so that the same
		// body sent again is the same delivery.
		sum := sha256.Sum256(body)
		d.ID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if len(d.ID) > MaxDeliveryIDLen || !utf8.ValidString(d.ID) {
		return d, formatErr("the delivery id is longer than %d bytes or not UTF-8", MaxDeliveryIDLen)
	}
	return d, nil
}

func isForm(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "application/x-www-form-urlencoded"
}

// DecodePayload decodes one JSON value with numbers kept as
// json.Number, so a template prints 12345678901 as sent, not as
// 1.2345678901e+10.
func DecodePayload(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

// EventName is the event as `events` entries name it: the event, and for
// GitHub its action after a dot ("pull_request.opened").
func EventName(event, action string) string {
	if action == "" {
		return event
	}
	return event + "." + action
}

// Match reports whether a trigger whose events are events takes a
// delivery of event and action: no entries take everything, "*" too; an
// entry names an event (any action) or an event.action.
func Match(events []string, event, action string) bool {
	if len(events) == 0 {
		return true
	}
	for _, e := range events {
		if e == "*" || e == event || action != "" && e == event+"."+action {
			return true
		}
	}
	return false
}
