package redact

import (
	"bytes"
	"regexp"
	"strings"
)

// shapes matches text shaped like a common credential: GitHub tokens
// (ghp_ and its kin, github_pat_), OpenAI-style keys (sk-), Slack tokens
// (xox[abpr]-), AWS access key ids (AKIA...) and PEM private key blocks
// (to the end of the text when the block was cut). The token shapes are
// anchored on word boundaries and long enough that ordinary words do not
// match; plausible checks the rest.
var shapes = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b` +
	`|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)`)

// shapePrefixes are what every match of shapes holds: text without any
// of them skips the regexp.
var shapePrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "sk-", "xoxa-", "xoxb-", "xoxp-", "xoxr-", "AKIA", "PRIVATE KEY-----"}

// plausible says whether a token match looks random, as a credential
// does, rather than like words joined by dashes ("sk-learn-...").
func plausible(m string) bool {
	var digit, upper, lower bool
	for i := strings.IndexAny(m, "_-") + 1; i < len(m); i++ {
		c := m[i]
		digit = digit || c >= '0' && c <= '9'
		upper = upper || c >= 'A' && c <= 'Z'
		lower = lower || c >= 'a' && c <= 'z'
	}
	switch {
	case strings.HasPrefix(m, "-----"), strings.HasPrefix(m, "AKIA"):
		return true
	case strings.HasPrefix(m, "sk-"):
		return digit && upper && lower
	}
	return digit
}

func shaped(s string) bool {
	for _, p := range shapePrefixes {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func shapedBytes(b []byte) bool {
	for _, p := range shapePrefixes {
		if bytes.Contains(b, []byte(p)) {
			return true
		}
	}
	return false
}

// Shapes replaces text shaped like a common credential in s by Unnamed.
func Shapes(s string) string {
	if !shaped(s) {
		return s
	}
	return shapes.ReplaceAllStringFunc(s, func(m string) string {
		if plausible(m) {
			return Unnamed
		}
		return m
	})
}

// ShapesJSON is Shapes on the strings, numbers and keys of a JSON
// document (a PEM block is cut at its string's end, never across the
// document's syntax).
func ShapesJSON(doc []byte) []byte {
	if !shapedBytes(doc) {
		return doc
	}
	var found bool
	for _, m := range shapes.FindAllString(string(doc), -1) {
		found = found || plausible(m)
	}
	if !found {
		return doc
	}
	return walkJSON(doc, Shapes)
}
