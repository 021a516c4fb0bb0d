// Package webhook owns what a webhook delivery is on the wire: the four
// signature schemes (github, standard, stripe, hmac), verified over the
// raw body bytes in constant time and signed the way each sender signs;
// where a scheme keeps its delivery id and event; and the templates that
// turn a delivery into a run's message and session id.
//
// It is pure: no store, no HTTP server, no clock but the one it is given.
// The dispatcher's intake (internal/api/hooks.go) and `agentctl triggers
// send` both use it, so what the CLI signs is what the intake verifies.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scheme names how a sender signs its deliveries.
type Scheme string

// The schemes.
const (
	GitHub   Scheme = "github"
	Standard Scheme = "standard"
	Stripe   Scheme = "stripe"
	HMAC     Scheme = "hmac"
)

// Schemes lists every scheme, in the order the docs name them.
var Schemes = []Scheme{GitHub, Standard, Stripe, HMAC}

// Valid reports whether s is a known scheme.
func (s Scheme) Valid() bool { return slices.Contains(Schemes, s) }

// Timestamped reports whether the scheme signs a timestamp, which must be
// within Tolerance of the receiver's clock. GitHub's is the one that
// does not: its deliveries are deduped on their body's digest instead.
func (s Scheme) Timestamped() bool { return s != GitHub }

// Tolerance is how far a signed timestamp may be from the receiver's
// clock, either way.
const Tolerance = 5 * time.Minute

// Header names the schemes use.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGitHubEvent     = "X-GitHub-Event"
	HeaderStandardID      = "webhook-id"
	HeaderStandardTime    = "webhook-timestamp"
	HeaderStandardSig     = "webhook-signature"
	HeaderStripeSignature = "Stripe-Signature"
	HeaderHMACSignature   = "X-Agentfleet-Signature"
	HeaderHMACDelivery    = "X-Agentfleet-Id"
	HeaderHMACTime        = "X-Agentfleet-Timestamp"
	HeaderHMACEvent       = "X-Event"
)

// SignatureError says why a delivery's signature was refused: the header
// that was missing or wrong, and how. It never holds an expected value.
type SignatureError struct {
	Header string
	Reason string
}

func (e *SignatureError) Error() string { return e.Header + " " + e.Reason }

func sigErr(header, format string, a ...any) error {
	return &SignatureError{Header: header, Reason: fmt.Sprintf(format, a...)}
}

// Verify checks that body was signed under scheme s with one of secrets
// (a trigger's current secret and, while its grace lasts, the previous
// one), and that a signed timestamp is within Tolerance of now. Every
// comparison is in constant time. A refusal is a *SignatureError.
func Verify(s Scheme, secrets []string, h http.Header, body []byte, now time.Time) error {
	if err := Precheck(s, h, now); err != nil {
		return err
	}
	switch s {
	case GitHub:
		return verifyHex(HeaderGitHubSignature, secrets, h.Get(HeaderGitHubSignature), body)
	case HMAC:
		prefix := []byte(h.Get(HeaderHMACDelivery) + "." + h.Get(HeaderHMACTime) + ".")
		return verifyHex(HeaderHMACSignature, secrets, h.Get(HeaderHMACSignature), prefix, body)
	case Standard:
		return verifyStandard(secrets, h, body)
	case Stripe:
		return verifyStripe(secrets, h, body)
	}
	return fmt.Errorf("webhook: unknown scheme %q", s)
}

// Precheck is what Verify checks before it needs the body: the headers
// it signs are present and well-formed, and a signed timestamp is within
// Tolerance of now. The intake runs it before it reads a body, so a
// stranger's unsigned or stale request costs no read. A refusal is a
// *SignatureError.
func Precheck(s Scheme, h http.Header, now time.Time) error {
	switch s {
	case GitHub:
		_, err := hexSig(HeaderGitHubSignature, h.Get(HeaderGitHubSignature))
		return err
	case HMAC:
		switch {
		case h.Get(HeaderHMACDelivery) == "":
			return sigErr(HeaderHMACDelivery, "is missing: the delivery id is signed with the body (%s.%s.body)", HeaderHMACDelivery, HeaderHMACTime)
		case h.Get(HeaderHMACTime) == "":
			return sigErr(HeaderHMACTime, "is missing: a Unix time in seconds, signed with the body")
		}
		if _, err := hexSig(HeaderHMACSignature, h.Get(HeaderHMACSignature)); err != nil {
			return err
		}
		return checkTime(HeaderHMACTime, h.Get(HeaderHMACTime), now)
	case Standard:
		switch {
		case h.Get(HeaderStandardID) == "":
			return sigErr(HeaderStandardID, "is missing")
		case h.Get(HeaderStandardTime) == "":
			return sigErr(HeaderStandardTime, "is missing")
		case h.Get(HeaderStandardSig) == "":
			return sigErr(HeaderStandardSig, "is missing")
		}
		return checkTime(HeaderStandardTime, h.Get(HeaderStandardTime), now)
	case Stripe:
		v := h.Get(HeaderStripeSignature)
		if v == "" {
			return sigErr(HeaderStripeSignature, "is missing")
		}
		ts, _ := stripeParts(v)
		if ts == "" {
			return sigErr(HeaderStripeSignature, "has no t=<unix time>")
		}
		return checkTime(HeaderStripeSignature, ts, now)
	}
	return fmt.Errorf("webhook: unknown scheme %q", s)
}

// hexSig decodes a "sha256=<hex>" header value.
func hexSig(header, v string) ([]byte, error) {
	if v == "" {
		return nil, sigErr(header, "is missing")
	}
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok {
		return nil, sigErr(header, "must be sha256=<hex digest>")
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return nil, sigErr(header, "is not a hex SHA-256 digest")
	}
	return got, nil
}

// verifyHex checks a "sha256=<hex>" header value over the signed parts.
func verifyHex(header string, secrets []string, v string, signed ...[]byte) error {
	got, err := hexSig(header, v)
	if err != nil {
		return err
	}
	for _, secret := range secrets {
		if hmac.Equal(got, mac([]byte(secret), signed...)) {
			return nil
		}
	}
	if header == HeaderHMACSignature {
		return sigErr(header, "does not match the id, timestamp and body signed with the trigger's secret")
	}
	return sigErr(header, "does not match the body signed with the trigger's secret")
}

// verifyStandard checks the signatures; Precheck has checked the headers
// are there and the time.
func verifyStandard(secrets []string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get(HeaderStandardID), h.Get(HeaderStandardTime), h.Get(HeaderStandardSig)
	var candidates [][]byte
	for _, entry := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another version (v1a: asymmetric) is not ours to check
		}
		if sig, err := base64.StdEncoding.DecodeString(b64); err == nil {
			candidates = append(candidates, sig)
		}
	}
	if len(candidates) == 0 {
		return sigErr(HeaderStandardSig, "has no v1,<base64> signature")
	}
	prefix := []byte(id + "." + ts + ".")
	for _, secret := range secrets {
		key, err := StandardKey(secret)
		if err != nil {
			continue
		}
		want := mac(key, prefix, body)
		for _, c := range candidates {
			if hmac.Equal(c, want) {
				return nil
			}
		}
	}
	return sigErr(HeaderStandardSig, "has no signature that matches the trigger's secret")
}

// stripeParts splits a Stripe-Signature value into its timestamp and its
// decodable v1 signatures.
func stripeParts(v string) (ts string, candidates [][]byte) {
	for _, part := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = val
		case "v1":
			if sig, err := hex.DecodeString(val); err == nil {
				candidates = append(candidates, sig)
			}
		}
	}
	return ts, candidates
}

// verifyStripe checks the signatures; Precheck has checked the time.
func verifyStripe(secrets []string, h http.Header, body []byte) error {
	ts, candidates := stripeParts(h.Get(HeaderStripeSignature))
	if len(candidates) == 0 {
		return sigErr(HeaderStripeSignature, "has no v1=<hex> signature")
	}
	prefix := []byte(ts + ".")
	for _, secret := range secrets {
		// Stripe's secret is the HMAC key as given, whsec_ prefix and all.
		want := mac([]byte(secret), prefix, body)
		for _, c := range candidates {
			if hmac.Equal(c, want) {
				return nil
			}
		}
	}
	return sigErr(HeaderStripeSignature, "has no v1 signature that matches the trigger's secret")
}

// checkTime checks a signed Unix timestamp against now, either way. It
// compares seconds, never a time.Duration: a timestamp centuries away
// would saturate one and pass.
func checkTime(header, ts string, now time.Time) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return sigErr(header, "has a timestamp that is not a Unix time in seconds")
	}
	tol := int64(Tolerance / time.Second)
	switch off := now.Unix(); {
	case sec < off-tol:
		return sigErr(header, "has a timestamp %s before the receiver's clock; at most %s is accepted (a replay, or a clock off)", ago(off-sec), Tolerance)
	case sec > off+tol:
		return sigErr(header, "has a timestamp %s after the receiver's clock; at most %s is accepted (a clock off, or a forged time)", ago(sec-off), Tolerance)
	}
	return nil
}

// ago renders a positive offset in seconds, without overflowing a
// Duration for offsets of centuries.
func ago(sec int64) string {
	if sec > int64(100*365*24*time.Hour/time.Second) {
		return "over a century"
	}
	return (time.Duration(sec) * time.Second).String()
}

// mac is the HMAC-SHA256 under key of the parts written one after the
// other (no copy of a large body to prefix it).
func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// StandardKey is the HMAC key of a Standard Webhooks secret: the base64
// after the whsec_ prefix (the prefix is optional, as in the spec's
// libraries).
func StandardKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("a standard secret is whsec_ followed by base64: %w", err)
	}
	return key, nil
}

// Limits on secrets a user gives.
const (
	secretMinLen = 16
	secretMaxLen = 256
	// Standard Webhooks keys are 24 to 64 bytes.
	standardKeyMin, standardKeyMax = 24, 64
)

// CheckSecret says what is wrong with a secret given for scheme s, or nil.
func CheckSecret(s Scheme, secret string) error {
	if s == Standard {
		key, err := StandardKey(secret)
		if err != nil {
			return err
		}
		if len(key) < standardKeyMin || len(key) > standardKeyMax {
			return fmt.Errorf("a standard secret's key is %d to %d bytes; this one is %d", standardKeyMin, standardKeyMax, len(key))
		}
		return nil
	}
	if len(secret) < secretMinLen || len(secret) > secretMaxLen {
		return fmt.Errorf("a secret is %d to %d characters; this one is %d", secretMinLen, secretMaxLen, len(secret))
	}
	return nil
}

// NewSecret returns a fresh random secret for scheme s: whsec_ and the
// base64 of 32 bytes for standard and stripe (the form their senders
// use), 32 random bytes in hex for github and hmac.
func NewSecret(s Scheme) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if s == Standard || s == Stripe {
		return "whsec_" + base64.StdEncoding.EncodeToString(b)
	}
	return hex.EncodeToString(b)
}

// Sign returns the headers a sender of scheme s attaches to body: the
// signature under secret, and the delivery id and event where the scheme
// carries them in headers (stripe carries both in the body). now is the
// signed timestamp of the timestamped schemes. An hmac delivery needs an
// id: it is signed.
func Sign(s Scheme, secret string, body []byte, delivery, event string, now time.Time) (http.Header, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	switch s {
	case GitHub:
		h.Set(HeaderGitHubSignature, "sha256="+hex.EncodeToString(mac([]byte(secret), body)))
		h.Set(HeaderGitHubDelivery, delivery)
		h.Set(HeaderGitHubEvent, event)
	case HMAC:
		if delivery == "" {
			return nil, errors.New("webhook: an hmac delivery needs an id (it is signed)")
		}
		ts := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderHMACDelivery, delivery)
		h.Set(HeaderHMACTime, ts)
		h.Set(HeaderHMACSignature, "sha256="+hex.EncodeToString(mac([]byte(secret), []byte(delivery+"."+ts+"."), body)))
		if event != "" {
			h.Set(HeaderHMACEvent, event)
		}
	case Standard:
		key, err := StandardKey(secret)
		if err != nil {
			return nil, err
		}
		ts := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderStandardID, delivery)
		h.Set(HeaderStandardTime, ts)
		h.Set(HeaderStandardSig, "v1,"+base64.StdEncoding.EncodeToString(mac(key, []byte(delivery+"."+ts+"."+string(body)))))
	case Stripe:
		ts := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderStripeSignature, "t="+ts+",v1="+hex.EncodeToString(mac([]byte(secret), []byte(ts+"."+string(body)))))
	default:
		return nil, fmt.Errorf("webhook: unknown scheme %q", s)
	}
	return h, nil
}
