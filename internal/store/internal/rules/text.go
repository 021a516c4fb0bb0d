package rules

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text hygiene. PostgreSQL refuses NUL in text columns (SQLSTATE 22021)
// and \u0000 in jsonb, and one refused value fails every turn of a
// shared commit; SQLite would keep the bytes but hand back other ones to
// some readers. So text reaches neither backend unless it is valid UTF-8
// without NUL, decided here for both:
//   - what scripts and models produce (logs, answers, errors, carried
//     args, replies, events) is cleaned: Clean and CleanJSON replace each
//     NUL and each invalid byte with U+FFFD;
//   - what a client submits (a run's message, metadata and context, a
//     tenant's or agent's text) is refused by CheckText and CheckJSONText,
//     naming the field: the store keeps submitted text exactly or not at
//     all.
//
// Both have a fast path that reads the input once and returns it as is.

// replacement is U+FFFD, what an unusable byte or NUL becomes; in JSON an
// escaped \u0000 or lone surrogate becomes jsonReplacement.
const (
	replacement     = "\uFFFD"
	jsonReplacement = `\ufffd`
)

// cleanText reports whether s is valid UTF-8 without NUL.
func cleanText(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// Clean returns s as valid UTF-8 without NUL: each NUL and each byte that
// is not part of a valid UTF-8 sequence becomes U+FFFD. Clean text comes
// back as is, without a copy.
func Clean(s string) string {
	if cleanText(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*len(replacement))
	for i := 0; i < len(s); {
		if c := s[i]; c != 0 && c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || r == utf8.RuneError && size == 1 {
			b.WriteString(replacement)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// CheckText refuses submitted text that is not valid UTF-8 or holds NUL,
// naming the field.
func CheckText(field, s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return Invalidf("%s contains U+0000 (NUL), which cannot be stored: remove it", field)
	case !utf8.ValidString(s):
		return Invalidf("%s is not valid UTF-8: send text as UTF-8", field)
	}
	return nil
}

// checkTexts is CheckText for several fields of one value, in order.
func checkTexts(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if err := CheckText(fields[i], fields[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// CheckMetadata is CheckText for every key and value of a string map.
func CheckMetadata(field string, m map[string]string) error {
	for k, v := range m {
		if err := CheckText(field+" key "+fmt.Sprintf("%q", k), k); err != nil {
			return err
		}
		if err := CheckText(field+" value of "+fmt.Sprintf("%q", k), v); err != nil {
			return err
		}
	}
	return nil
}

// CleanJSON returns the valid JSON value raw with what Clean would
// replace in its strings replaced, and escapes jsonb refuses (\u0000 and
// unpaired UTF-16 surrogates) written as \ufffd, so it stays valid JSON.
// A clean value comes back as is, without a copy.
func CleanJSON(raw []byte) []byte {
	out, _ := scanJSON(raw, true)
	return out
}

// CheckJSONText refuses a submitted JSON value (valid JSON, see
// CheckJSON) that CleanJSON would change, naming the field.
func CheckJSONText(field string, raw []byte) error {
	if _, problem := scanJSON(raw, false); problem != "" {
		return Invalidf("%s contains %s, which cannot be stored: remove it", field, problem)
	}
	return nil
}

// scanJSON finds in the valid JSON value raw what CleanJSON replaces.
// With fix it returns raw cleaned (raw itself when nothing needed it);
// without, it stops at the first problem and names it. Backslashes occur
// only inside JSON strings, so escapes are found without tracking
// strings, and any byte not ASCII is inside one.
func scanJSON(raw []byte, fix bool) ([]byte, string) {
	// Only \u escapes can need a change.
	if !bytes.Contains(raw, []byte(`\u`)) && utf8.Valid(raw) {
		return raw, ""
	}
	var out []byte // nil until something is replaced
	var problem string
	// replace writes repl for what starts at raw[i] (the caller skips
	// it) and notes why.
	replace := func(i int, repl, why string) {
		if problem == "" {
			problem = why
		}
		if out == nil {
			out = append(make([]byte, 0, len(raw)+8), raw[:i]...)
		}
		out = append(out, repl...)
	}
	keep := func(i, n int) {
		if out != nil {
			out = append(out, raw[i:i+n]...)
		}
	}
	for i := 0; i < len(raw) && (fix || problem == ""); {
		switch c := raw[i]; {
		case c == '\\':
			n, why := jsonEscape(raw, i)
			if why != "" {
				replace(i, jsonReplacement, why)
			} else {
				keep(i, n)
			}
			i += n
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(raw) && raw[j] < utf8.RuneSelf && raw[j] != '\\' {
				j++
			}
			keep(i, j-i)
			i = j
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				replace(i, replacement, "bytes that are not UTF-8")
			} else {
				keep(i, size)
			}
			i += size
		}
	}
	if out == nil {
		return raw, problem
	}
	return out, problem
}

// jsonEscape reads the escape at raw[i] (a backslash): its length, and
// why it must be replaced ("" when it may stay).
func jsonEscape(raw []byte, i int) (int, string) {
	if i+6 > len(raw) || raw[i+1] != 'u' {
		return min(2, len(raw)-i), "" // \" \\ \/ \b \f \n \r \t
	}
	v, ok := hex4(raw[i+2 : i+6])
	switch {
	case !ok:
	case v == 0:
		return 6, "U+0000 (NUL)"
	case v >= 0xD800 && v < 0xDC00 && lowSurrogateAt(raw, i+6):
		return 12, ""
	case v >= 0xD800 && v < 0xE000:
		return 6, "an unpaired UTF-16 surrogate escape"
	}
	return 6, ""
}

// lowSurrogateAt reports whether raw holds a \uDC00-\uDFFF escape at i.
func lowSurrogateAt(raw []byte, i int) bool {
	if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
		return false
	}
	v, ok := hex4(raw[i+2 : i+6])
	return ok && v >= 0xDC00 && v < 0xE000
}

// hex4 decodes four hex digits.
func hex4(b []byte) (rune, bool) {
	var v rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
