package redact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

func TestRedactorLabels(t *testing.T) {
	t.Parallel()
	require.Nil(t, New(nil))
	require.Nil(t, New([]Value{{Name: "x"}}))
	var nilR *Redactor
	require.Equal(t, "as is", nilR.String("as is"))
	require.Equal(t, []byte(`{}`), nilR.JSON([]byte(`{}`)))

	tenant := []agentfleet.OpenSecret{
		{Secret: agentfleet.Secret{Name: "gh"}, Value: "tok-123"},
		// A value that begins another is not replaced inside it.
		{Secret: agentfleet.Secret{Name: "long"}, Value: "tok-1234567"},
		{Secret: agentfleet.Secret{Name: "quoted"}, Value: `pa"ss`},
	}
	r := New(Values([]string{"prov-key"}, tenant))
	require.Equal(t, "a [secret:gh] b [secret:long] c [redacted] d [secret:quoted]", r.String(`a tok-123 b tok-1234567 c prov-key d pa"ss`))
	require.JSONEq(t, `{"p":"[secret:quoted]","t":["x [secret:gh]"]}`, string(r.JSON([]byte(`{"p":"pa\"ss","t":["x tok-123"]}`))))
	doc := []byte(`{"clean":true}`)
	require.Equal(t, doc, r.JSON(doc))
	// A numeric value is redacted value by value, keeping valid JSON.
	num := New([]Value{{Name: "pin", Value: "4242"}})
	require.JSONEq(t, `{"pin":"[secret:pin]","list":[1,"[secret:pin]"]}`, string(num.JSON([]byte(`{"pin":4242,"list":[1,4242]}`))))
}

func TestShapes(t *testing.T) {
	t.Parallel()
	redacted := []string{
		"ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
		"gho_16C7e42F292c6912E7710c838347Ae178B4a",
		"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
		"sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv",
		"sk-ant-api03-Xy7Zq2Wv9Ut4Sr1Qp8On5Ml",
		"sk-T3BlbkFJ0a1b2c3d4e5f6g7h8i9j0kLmNoP",
		"xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
		"xoxp-2398470923-2398470923",
		"AKIAIOSFODNN7EXAMPLE",
	}
	for _, tok := range redacted {
		for _, ctx := range []string{"%s", "key=%s;", "(%s)", `"%s"`, "Bearer %s\n"} {
			in := strings.Replace(ctx, "%s", tok, 1)
			require.Equal(t, strings.Replace(ctx, "%s", Unnamed, 1), Shapes(in), in)
		}
	}
	pem := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"
	require.Equal(t, "key: [redacted] done", Shapes("key: "+pem+" done"))
	require.Equal(t, "cut: [redacted]", Shapes("cut: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg"))
	require.Equal(t, "-----BEGIN PUBLIC KEY-----\nMIIBIj\n-----END PUBLIC KEY-----", Shapes("-----BEGIN PUBLIC KEY-----\nMIIBIj\n-----END PUBLIC KEY-----"))

	// Ordinary text, including near misses, is left alone.
	for _, s := range []string{
		"use sk-learn for the model; the task-force met; risk-assessment-of-the-project-plan",
		"sk-learn-is-a-python-library-for-machine-learning",
		"a ghp_ prefix alone, ghp_short1, and tghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
		"xoxo-hugs-and-kisses, xoxb-", "AKIA is a prefix; AKIAIOSFODNN7EXAMPLEX is too long; xAKIAIOSFODNN7EXAMPLE",
		"github_pat_ is documented here", "the mask-0123456789abcdefABCDEF covers it",
		"Thu, 03 Dec 2026 08:13:51 GMT", "SGVsbG8gV29ybGQ=", "", "ünïcode sk-ø",
	} {
		require.Equal(t, s, Shapes(s), s)
	}
}

func TestShapesJSON(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"k":"AKIAIOSFODNN7EXAMPLE","pem":"-----BEGIN EC PRIVATE KEY-----\nabc","after":"kept"}`)
	require.JSONEq(t, `{"k":"[redacted]","pem":"[redacted]","after":"kept"}`, string(ShapesJSON(doc)))
	clean := []byte(`{"note":"sk-learn"}`)
	require.Equal(t, clean, ShapesJSON(clean))
}

// The cost of redacting a turn's output for a tenant with 10 secrets and
// a provider key: a prompt-sized text and a 200-item carried value, with
// nothing to replace (the common case) and with one value in each.
func BenchmarkRedactor(b *testing.B) {
	var vs []Value
	vs = append(vs, Value{Value: "sk-proj-4f8e2a1c9b7d6e5f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d"})
	for i := range 10 {
		vs = append(vs, Value{Name: fmt.Sprintf("secret_%d", i), Value: fmt.Sprintf("value-%d-4f8e2a1c9b7d6e5f3a2b1c0d", i)})
	}
	r := New(vs)
	prompt := strings.Repeat("The model wrote a script and the sandbox ran it; log lines follow. ", 100) // 6.7 KB
	var items []map[string]any
	for i := range 200 {
		items = append(items, map[string]any{"id": i, "name": fmt.Sprintf("item %d", i), "price": float64(i) * 1.25, "tags": []string{"a", "b"}})
	}
	carried, err := json.Marshal(items)
	if err != nil {
		b.Fatal(err)
	}
	withSecret := prompt + vs[3].Value
	carriedWithSecret := append(carried[:len(carried)-1:len(carried)-1], []byte(`,"`+vs[5].Value+`"]`)...)
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"prompt-clean", func() { _ = r.String(prompt) }},
		{"prompt-one-secret", func() { _ = r.String(withSecret) }},
		{"carried200-clean", func() { _ = r.JSON(carried) }},
		{"carried200-one-secret", func() { _ = r.JSON(carriedWithSecret) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.run()
			}
		})
	}
}
