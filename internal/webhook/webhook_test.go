package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The providers' published examples, and vectors computed with openssl
// for the schemes that publish none (see each case).
var (
	// GitHub's "Testing the webhook payload validation" example.
	githubSecret = "It's a Secret to Everybody"
	githubBody   = []byte("Hello, World!")
	githubSig    = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

	// The Standard Webhooks reference libraries' signing test
	// (libraries/go/webhook_test.go, TestWebhookSign).
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	standardTS     = int64(1614265330)
	standardBody   = []byte(`{"test": 2432232314}`)
	standardSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	// printf '%s' '1700000000.<body>' | openssl dgst -sha256 -hmac whsec_agentfleet_stripe_test_vector
	stripeSecret = "whsec_agentfleet_stripe_test_vector"
	stripeTS     = int64(1700000000)
	stripeBody   = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI6ZsXXX","type":"invoice.paid"}`)
	stripeV1     = "a0454215d03dde6652335f93b1f440f7ad7f41be8a77aed23416029029a6c120"

	// printf '%s' 'msg_7.1700000000.Hello, World!' | openssl dgst -sha256 -hmac agentfleet-hmac-test-vector
	hmacSecret = "agentfleet-hmac-test-vector"
	hmacID     = "msg_7"
	hmacTS     = int64(1700000000)
	hmacBody   = []byte("Hello, World!")
	hmacSig    = "sha256=9d2eceddd2ef2c8bfcf9f0dfa8e4588633ef7342e50226a9301c1fc55be8c321"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func ts(sec int64) string { return strconv.FormatInt(sec, 10) }

// TestVerify runs every scheme against its vector, then tampered body,
// wrong secret, missing header, several signatures of which one matches,
// and the timestamp window's edges.
func TestVerify(t *testing.T) {
	stdAt := time.Unix(standardTS, 0)
	stripeAt := time.Unix(stripeTS, 0)
	stdHdr := func(sig string, at int64) http.Header {
		return hdr(HeaderStandardID, standardID, HeaderStandardTime, ts(at), HeaderStandardSig, sig)
	}
	stripeHdr := func(v string) http.Header { return hdr(HeaderStripeSignature, v) }
	hmacAt := time.Unix(hmacTS, 0)
	hmacHdr := func(id string, at int64) http.Header {
		return hdr(HeaderHMACDelivery, id, HeaderHMACTime, ts(at), HeaderHMACSignature, hmacSig)
	}
	// far is a timestamp thousands of years ahead: an offset that would
	// saturate a time.Duration.
	const far = 99999999999
	wrongB64 := "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
	for _, tc := range []struct {
		name    string
		scheme  Scheme
		secrets []string
		h       http.Header
		body    []byte
		now     time.Time
		header  string // the header a refusal names; "" when accepted
	}{
		{"github vector", GitHub, []string{githubSecret}, hdr(HeaderGitHubSignature, githubSig), githubBody, time.Now(), ""},
		{"github tampered", GitHub, []string{githubSecret}, hdr(HeaderGitHubSignature, githubSig), []byte("Hello, World?"), time.Now(), HeaderGitHubSignature},
		{"github wrong secret", GitHub, []string{"It's a Secret to Nobody"}, hdr(HeaderGitHubSignature, githubSig), githubBody, time.Now(), HeaderGitHubSignature},
		{"github missing", GitHub, []string{githubSecret}, hdr("X-Hub-Signature", "sha1=abc"), githubBody, time.Now(), HeaderGitHubSignature},
		{"github not sha256", GitHub, []string{githubSecret}, hdr(HeaderGitHubSignature, strings.TrimPrefix(githubSig, "sha256=")), githubBody, time.Now(), HeaderGitHubSignature},
		{"github previous secret", GitHub, []string{"the-new-secret-0123456789", githubSecret}, hdr(HeaderGitHubSignature, githubSig), githubBody, time.Now(), ""},

		{"standard vector", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), standardBody, stdAt, ""},
		{"standard tampered", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), []byte(`{"test": 2432232315}`), stdAt, HeaderStandardSig},
		{"standard wrong secret", Standard, []string{"whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="}, stdHdr(standardSig, standardTS), standardBody, stdAt, HeaderStandardSig},
		{"standard missing signature", Standard, []string{standardSecret}, hdr(HeaderStandardID, standardID, HeaderStandardTime, ts(standardTS)), standardBody, stdAt, HeaderStandardSig},
		{"standard missing id", Standard, []string{standardSecret}, hdr(HeaderStandardTime, ts(standardTS), HeaderStandardSig, standardSig), standardBody, stdAt, HeaderStandardID},
		{"standard missing timestamp", Standard, []string{standardSecret}, hdr(HeaderStandardID, standardID, HeaderStandardSig, standardSig), standardBody, stdAt, HeaderStandardTime},
		{"standard one of several", Standard, []string{standardSecret}, stdHdr(wrongB64+" v2,abc "+standardSig+" "+wrongB64, standardTS), standardBody, stdAt, ""},
		{"standard none of several", Standard, []string{standardSecret}, stdHdr(wrongB64+" "+wrongB64, standardTS), standardBody, stdAt, HeaderStandardSig},
		{"standard just inside the window", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), standardBody, stdAt.Add(Tolerance - time.Second), ""},
		{"standard at the window's edge", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), standardBody, stdAt.Add(-Tolerance), ""},
		{"standard just outside the window", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), standardBody, stdAt.Add(Tolerance + time.Second), HeaderStandardTime},
		{"standard from the future", Standard, []string{standardSecret}, stdHdr(standardSig, standardTS), standardBody, stdAt.Add(-Tolerance - time.Second), HeaderStandardTime},
		{"standard unprefixed secret", Standard, []string{strings.TrimPrefix(standardSecret, "whsec_")}, stdHdr(standardSig, standardTS), standardBody, stdAt, ""},

		{"stripe vector", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + stripeV1), stripeBody, stripeAt, ""},
		{"stripe tampered", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + stripeV1), []byte(`{"id":"evt_2","type":"invoice.paid"}`), stripeAt, HeaderStripeSignature},
		{"stripe wrong secret", Stripe, []string{"whsec_another_stripe_secret"}, stripeHdr("t=1700000000,v1=" + stripeV1), stripeBody, stripeAt, HeaderStripeSignature},
		{"stripe missing", Stripe, []string{stripeSecret}, hdr(), stripeBody, stripeAt, HeaderStripeSignature},
		{"stripe one of several", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + strings.Repeat("0", 64) + ",v0=abc,v1=" + stripeV1), stripeBody, stripeAt, ""},
		{"stripe signed time moved", Stripe, []string{stripeSecret}, stripeHdr("t=1700000001,v1=" + stripeV1), stripeBody, stripeAt, HeaderStripeSignature},
		{"stripe just inside the window", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + stripeV1), stripeBody, stripeAt.Add(Tolerance - time.Second), ""},
		{"stripe just outside the window", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + stripeV1), stripeBody, stripeAt.Add(Tolerance + time.Second), HeaderStripeSignature},
		{"stripe no timestamp", Stripe, []string{stripeSecret}, stripeHdr("v1=" + stripeV1), stripeBody, stripeAt, HeaderStripeSignature},

		{"standard far in the future", Standard, []string{standardSecret}, stdHdr(standardSig, far), standardBody, stdAt, HeaderStandardTime},
		{"standard far in the past", Standard, []string{standardSecret}, stdHdr(standardSig, -far), standardBody, stdAt, HeaderStandardTime},
		{"stripe far in the future", Stripe, []string{stripeSecret}, stripeHdr("t=99999999999,v1=" + stripeV1), stripeBody, stripeAt, HeaderStripeSignature},
		{"stripe from the future", Stripe, []string{stripeSecret}, stripeHdr("t=1700000000,v1=" + stripeV1), stripeBody, stripeAt.Add(-Tolerance - time.Second), HeaderStripeSignature},

		{"hmac vector", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS), hmacBody, hmacAt, ""},
		{"hmac tampered", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS), []byte("Hello, World"), hmacAt, HeaderHMACSignature},
		{"hmac id changed", HMAC, []string{hmacSecret}, hmacHdr("msg_8", hmacTS), hmacBody, hmacAt, HeaderHMACSignature},
		{"hmac timestamp changed", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS+1), hmacBody, hmacAt, HeaderHMACSignature},
		{"hmac wrong secret", HMAC, []string{"agentfleet-hmac-other-secret"}, hmacHdr(hmacID, hmacTS), hmacBody, hmacAt, HeaderHMACSignature},
		{"hmac signature missing", HMAC, []string{hmacSecret}, hdr(HeaderHMACDelivery, hmacID, HeaderHMACTime, ts(hmacTS), HeaderGitHubSignature, hmacSig), hmacBody, hmacAt, HeaderHMACSignature},
		{"hmac id missing", HMAC, []string{hmacSecret}, hdr(HeaderHMACTime, ts(hmacTS), HeaderHMACSignature, hmacSig), hmacBody, hmacAt, HeaderHMACDelivery},
		{"hmac timestamp missing", HMAC, []string{hmacSecret}, hdr(HeaderHMACDelivery, hmacID, HeaderHMACSignature, hmacSig), hmacBody, hmacAt, HeaderHMACTime},
		{"hmac just inside the window", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS), hmacBody, hmacAt.Add(-Tolerance), ""},
		{"hmac stale", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS), hmacBody, hmacAt.Add(Tolerance + time.Second), HeaderHMACTime},
		{"hmac from the future", HMAC, []string{hmacSecret}, hmacHdr(hmacID, hmacTS), hmacBody, hmacAt.Add(-Tolerance - time.Second), HeaderHMACTime},
		{"hmac far in the future", HMAC, []string{hmacSecret}, hmacHdr(hmacID, far), hmacBody, hmacAt, HeaderHMACTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.scheme, tc.secrets, tc.h, tc.body, tc.now)
			if tc.header == "" {
				require.NoError(t, err)
				return
			}
			var se *SignatureError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.header, se.Header, err.Error())
			for _, s := range tc.secrets {
				require.NotContains(t, err.Error(), s, "a refusal never shows a secret")
			}
		})
	}
}

// TestSignMatchesTheVectors checks that what the CLI and the test
// endpoint sign is what each provider's example says.
func TestSignMatchesTheVectors(t *testing.T) {
	h, err := Sign(GitHub, githubSecret, githubBody, "d1", "push", time.Now())
	require.NoError(t, err)
	require.Equal(t, githubSig, h.Get(HeaderGitHubSignature))
	require.Equal(t, "d1", h.Get(HeaderGitHubDelivery))
	require.Equal(t, "push", h.Get(HeaderGitHubEvent))

	h, err = Sign(Standard, standardSecret, standardBody, standardID, "", time.Unix(standardTS, 0))
	require.NoError(t, err)
	require.Equal(t, standardSig, h.Get(HeaderStandardSig))
	require.Equal(t, ts(standardTS), h.Get(HeaderStandardTime))

	h, err = Sign(Stripe, stripeSecret, stripeBody, "", "", time.Unix(stripeTS, 0))
	require.NoError(t, err)
	require.Equal(t, "t=1700000000,v1="+stripeV1, h.Get(HeaderStripeSignature))

	h, err = Sign(HMAC, hmacSecret, hmacBody, hmacID, "build", time.Unix(hmacTS, 0))
	require.NoError(t, err)
	require.Equal(t, hmacSig, h.Get(HeaderHMACSignature))
	require.Equal(t, hmacID, h.Get(HeaderHMACDelivery))
	require.Equal(t, ts(hmacTS), h.Get(HeaderHMACTime))
	_, err = Sign(HMAC, hmacSecret, hmacBody, "", "", time.Now())
	require.Error(t, err, "an hmac delivery's id is signed: there must be one")

	for _, s := range Schemes {
		secret := NewSecret(s)
		require.NoError(t, CheckSecret(s, secret), s)
		now := time.Now()
		h, err := Sign(s, secret, stripeBody, "d3", "e", now)
		require.NoError(t, err)
		require.NoError(t, Verify(s, []string{secret}, h, stripeBody, now), s)
	}
	require.True(t, strings.HasPrefix(NewSecret(Standard), "whsec_"))
}

// TestPrecheck: what the intake refuses before it reads a body, and
// that it passes whatever Verify would accept.
func TestPrecheck(t *testing.T) {
	now := time.Now()
	for _, s := range Schemes {
		secret := NewSecret(s)
		h, err := Sign(s, secret, stripeBody, "d1", "e", now)
		require.NoError(t, err)
		require.NoError(t, Precheck(s, h, now), s)
		require.Error(t, Precheck(s, http.Header{}, now), s)
		if s.Timestamped() {
			require.Error(t, Precheck(s, h, now.Add(Tolerance+time.Minute)), s)
			require.Error(t, Precheck(s, h, now.Add(-Tolerance-time.Minute)), s)
		}
	}
}

func TestCheckSecret(t *testing.T) {
	require.NoError(t, CheckSecret(Standard, standardSecret))
	require.Error(t, CheckSecret(Standard, "whsec_not base64!"))
	require.Error(t, CheckSecret(Standard, "whsec_c2hvcnQ="), "a 5-byte key")
	require.NoError(t, CheckSecret(GitHub, githubSecret))
	require.Error(t, CheckSecret(GitHub, "short"))
}

// TestFarFutureTimestampRefused: a delivery correctly signed with a
// timestamp thousands of years ahead is refused for its time; the offset
// must not saturate and pass.
func TestFarFutureTimestampRefused(t *testing.T) {
	for _, s := range []Scheme{Standard, Stripe, HMAC} {
		secret := NewSecret(s)
		h, err := Sign(s, secret, stripeBody, "d-far", "e", time.Unix(99999999999, 0))
		require.NoError(t, err)
		err = Verify(s, []string{secret}, h, stripeBody, time.Now())
		var se *SignatureError
		require.ErrorAs(t, err, &se, s)
		require.Contains(t, se.Reason, "after the receiver's clock", s)
	}
}
