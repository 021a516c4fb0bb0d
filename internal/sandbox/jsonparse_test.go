package sandbox

import (
	"encoding/json"
	"errors"

	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/stretchr/testify/require"
)

// treeObj is an object as the tree sink builds it: every member, in
// document order, duplicates included.
type treeObj struct {
	keys []string
	vals []any
}

// treeSink builds plain Go values: nil, bool, float64, string (WTF-8
// when it has lone surrogates), []any and *treeObj.
type treeSink struct{}

func (treeSink) null() any             { return nil }
func (treeSink) boolean(b bool) any    { return b }
func (treeSink) number(f float64) any  { return f }
func (treeSink) str(s jsonStr) any     { return s.s }
func (treeSink) array(elems []any) any { return append([]any{}, elems...) }
func (treeSink) object(keys []jsonStr, vals []any) any {
	o := &treeObj{vals: append([]any(nil), vals...)}
	for _, k := range keys {
		o.keys = append(o.keys, k.s)
	}
	return o
}

func parseTree(doc string) (any, error) { return parseJSONWith[any](doc, treeSink{}) }

// asEncodingJSON is v as encoding/json decodes the same document into an
// any: a duplicate key's last value wins and lone surrogates are U+FFFD.
func asEncodingJSON(v any) any {
	switch x := v.(type) {
	case string:
		return jsonStr{s: x, lone: !utf8.ValidString(x)}.utf8Key()
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = asEncodingJSON(e)
		}
		return out
	case *treeObj:
		m := map[string]any{}
		for i, k := range x.keys {
			m[asEncodingJSON(k).(string)] = asEncodingJSON(x.vals[i])
		}
		return m
	}
	return v
}

// hasLone reports whether any string or key in v has a lone surrogate,
// which goja's JSON.parse (through encoding/json) turns into U+FFFD.
func hasLone(v any) bool {
	switch x := v.(type) {
	case string:
		return !utf8.ValidString(x)
	case []any:
		for _, e := range x {
			if hasLone(e) {
				return true
			}
		}
	case *treeObj:
		for i, k := range x.keys {
			if hasLone(k) || hasLone(x.vals[i]) {
				return true
			}
		}
	}
	return false
}

func nested(open, close string, n int) string {
	return strings.Repeat(open, n) + strings.Repeat(close, n)
}

// validDocs are tricky valid documents, the seed of the fuzz test too.
var validDocs = []string{
	`null`, `true`, `false`, `0`, `-0`, `"x"`, `""`,
	` 	
 {} `, `[]`, `[[]]`, `{"a":{}}`, `[{}, [], "", 0]`,
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	// Strings: escapes, unicode raw and escaped, pairs, controls.
	`"héllo wörld ✓"`, `"\u00e9\u00E9"`, `"\ud83d\ude00 😀"`, `"\"\\\/\b\f\n\r\t"`,
	`"a\u0000b\u001f"`, `"\u2028\u2029"`, `"\u0041\u0062"`, `"\ud7ff\ue000\uffff"`,
	`"tab\tin\\text with \"quotes\""`, `"ends with escape\n"`, `"\\"`,
	// Numbers.
	`1e21`, `1E+2`, `-1.5e-7`, `1e-7`, `0.1`, `5e-324`, `1.7976931348623157e308`,
	`123456789012345678901234567890`, `9007199254740993`, `-9007199254740992`,
	`100000000000000000000`, `123456789012345`, `-123456789012345`, `1234567890123456`,
	`0.000001`, `1.0`, `-0.0`, `0e0`, `12.5e+3`, `[1,-1,2.5,-2.5,1e2]`,
	// Objects: duplicates, odd keys, integer-like keys, __proto__.
	`{"a":1,"b":2,"a":3}`, `{"a":[1],"a":{"x":1}}`, `{"":1," ":2}`,
	`{"1":"one","b":"bee","0":"zero","-1":"minus","01":"oh-one"}`,
	`{"__proto__":1}`, `{"__proto__":{"polluted":true}}`, `{"constructor":1,"toString":2,"hasOwnProperty":3}`,
	`{"é":1,"\u00e9":2,"😀":3,"\ud83d\ude00":4}`, `{"a\"b":1,"a\\b":2,"a\nb":3}`,
	// Depth and size.
	nested("[", "]", 1000), nested(`{"a":`, "}", 999) + "", strings.Repeat(`{"a":`, 500) + "1" + strings.Repeat("}", 500),
	string(carry200Args()),
}

// invalidDocs must be refused.
var invalidDocs = []string{
	``, ` `, `{`, `}`, `[`, `]`, `[1,]`, `[,1]`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a" 1}`, `{a:1}`, `{'a':1}`,
	`01`, `-01`, `1.`, `.5`, `+1`, `-`, `1e`, `1e+`, `1.e3`, `0x10`, `1_000`, `NaN`, `Infinity`, `-Infinity`,
	`"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, `"\`, `"\u`, `"a` + "\n" + `b"`, "\"\x01\"", `'a'`,
	`tru`, `nul`, `falsey`, `True`, `[1 2]`, `[1]x`, `1 2`, `{}{}`, `[]]`, `"a" "b"`, "\ufeff1",
	`{"a":1 "b":2}`, `[` + strings.Repeat(`"x",`, 10) + `]`,
	nested("[", "]", maxJSONDepth+1), nested(`{"a":`, "}", maxJSONDepth) + "",
}

func TestParseJSONValues(t *testing.T) {
	lone := "\xed\xa0\x80" // U+D800 in WTF-8
	cases := []struct {
		doc  string
		want any
	}{
		{`null`, nil},
		{` true `, true},
		{`-0`, math.Copysign(0, -1)},
		{`-0.0`, math.Copysign(0, -1)},
		{`1e21`, 1e21},
		{`1e400`, math.Inf(1)},
		{`-1e400`, math.Inf(-1)},
		{`1e-400`, 0.0},
		{`123456789012345678901234567890`, 123456789012345678901234567890.0},
		{`9007199254740993`, 9007199254740992.0},
		{`[]`, []any{}},
		{`{}`, &treeObj{}},
		{`{"b":1,"a":2,"b":3}`, &treeObj{keys: []string{"b", "a", "b"}, vals: []any{1.0, 2.0, 3.0}}},
		{`"\u00e9\ud83d\ude00\n"`, "é😀\n"},
		{`"\ud800"`, lone},
		{`"a\udc00b"`, "a\xed\xb0\x80b"},
		{`"\ud800\ud800\udc00"`, lone + "𐀀"},
		{`"\ud800\u0041"`, lone + "A"},
		{`"\ud800\\u0041"`, lone + `\u0041`},
		{`"\ude00\ud83d"`, "\xed\xb8\x80\xed\xa0\xbd"},
		// Bytes that are not UTF-8 become U+FFFD, one each; with and
		// without escapes in the string.
		{"\"a\xffb\xc3\"", "a\uFFFDb\uFFFD"},
		{"\"\\n\xed\xa0\x80\"", "\n\uFFFD\uFFFD\uFFFD"},
		{"\"\xe2\x9c\"", "\uFFFD\uFFFD"},
	}
	for _, c := range cases {
		got, err := parseTree(c.doc)
		require.NoError(t, err, c.doc)
		if f, ok := c.want.(float64); ok {
			require.Equal(t, math.Float64bits(f), math.Float64bits(got.(float64)), "%s: got %v", c.doc, got)
			continue
		}
		require.Equal(t, c.want, got, c.doc)
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, doc := range invalidDocs {
		_, err := parseTree(doc)
		require.Error(t, err, "%.60q", doc)
		var se *jsonSyntaxError
		require.True(t, errors.As(err, &se), "%.60q: %T", doc, err)
		require.LessOrEqual(t, se.offset, len(doc))
	}
	for doc, want := range map[string]string{
		`{"a":1,}`:                       `unexpected character '}' in object (expected a property name in double quotes) at offset 7`,
		`[1 2]`:                          `unexpected character '2' in array (expected , or ]) at offset 3`,
		`[1`:                             `unexpected end of JSON input at offset 2`,
		`"abc`:                           `unterminated string at offset 4`,
		`{"a":tru}`:                      `unexpected character '}' in literal true at offset 8`,
		`[1]x`:                           `unexpected character 'x' after the JSON value at offset 3`,
		`"\q"`:                           `bad escape \q in string at offset 1`,
		`"é` + "\t\"":                    `unexpected control character in string at offset 3`,
		`01`:                             `unexpected character '1' after the JSON value at offset 1`,
		`-x`:                             `unexpected character 'x' in number (expected a digit) at offset 1`,
		`é`:                              `unexpected character 'é' at offset 0`,
		nested("[", "]", maxJSONDepth+1): `JSON nested too deeply (more than 10000 levels) at offset 10000`,
	} {
		_, err := parseTree(doc)
		require.EqualError(t, err, want, "%.60q", doc)
	}
	// The deepest document accepted.
	_, err := parseTree(nested("[", "]", maxJSONDepth))
	require.NoError(t, err)
}

// TestParseJSONMatchesEncodingJSON holds the parser to encoding/json: the
// same documents are valid, and they decode to the same values.
func TestParseJSONMatchesEncodingJSON(t *testing.T) {
	for _, doc := range append(append([]string{}, validDocs...), invalidDocs...) {
		checkAgainstEncodingJSON(t, []byte(doc))
	}
}

func checkAgainstEncodingJSON(t *testing.T, data []byte) {
	t.Helper()
	got, err := parseTree(string(data))
	if valid := json.Valid(data); valid != (err == nil) {
		t.Fatalf("%.80q: encoding/json says valid=%v, parser error %v", data, valid, err)
	}
	if err != nil {
		return
	}
	var want any
	if err := json.Unmarshal(data, &want); err != nil {
		// Only numbers beyond float64 (1e400): JavaScript's Infinity.
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Value != "number" && !strings.HasPrefix(te.Value, "number ") {
			t.Fatalf("%.80q: encoding/json: %v", data, err)
		}
		return
	}
	if g := asEncodingJSON(got); !reflect.DeepEqual(g, want) {
		t.Fatalf("%.80q:\nparser        %#v\nencoding/json %#v", data, g, want)
	}
	// -0 and the like: DeepEqual compares floats with ==.
	if f, ok := want.(float64); ok && math.Float64bits(f) != math.Float64bits(got.(float64)) {
		t.Fatalf("%.80q: parser %v, encoding/json %v", data, got, want)
	}
}

// sameJS compares two JavaScript values deeply: types, -0, key order,
// prototypes and property attributes. It returns "" or where they
// differ.
const sameJS = `(function same(a, b, path) {
  if (typeof a !== typeof b) return path + ": typeof " + typeof a + " vs " + typeof b;
  if (a === null || b === null) return a === b ? "" : path + ": null vs not";
  if (typeof a === "number") return Object.is(a, b) ? "" : path + ": " + a + " vs " + b;
  if (typeof a !== "object") return a === b ? "" : path + ": " + JSON.stringify(a) + " vs " + JSON.stringify(b);
  if (Array.isArray(a) !== Array.isArray(b)) return path + ": isArray";
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return path + ": prototype";
  if (Object.isExtensible(a) !== Object.isExtensible(b)) return path + ": extensible";
  const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);
  if (JSON.stringify(ka) !== JSON.stringify(kb)) return path + ": keys " + JSON.stringify(ka) + " vs " + JSON.stringify(kb);
  for (const k of ka) {
    const da = Object.getOwnPropertyDescriptor(a, k), db = Object.getOwnPropertyDescriptor(b, k);
    if (da.writable !== db.writable || da.enumerable !== db.enumerable || da.configurable !== db.configurable) return path + "." + k + ": attributes";
    const r = same(da.value, db.value, path + "." + k);
    if (r) return r;
  }
  return "";
})`

// jsChecker parses documents both ways in one runtime.
type jsChecker struct {
	vm    *goja.Runtime
	parse goja.Callable
	same  goja.Callable
}

func newJSChecker(t testing.TB) *jsChecker {
	vm := goja.New()
	c := &jsChecker{vm: vm}
	c.parse, _ = goja.AssertFunction(vm.Get("JSON").(*goja.Object).Get("parse"))
	same, err := vm.RunString(sameJS)
	require.NoError(t, err)
	c.same, _ = goja.AssertFunction(same)
	return c
}

// check compares parseJS with goja's JSON.parse on doc, where goja's is
// right: both refuse it, or both make the same value. It returns false
// when the comparison does not apply (see the cases).
func (c *jsChecker) check(t testing.TB, doc string) bool {
	t.Helper()
	tree, treeErr := parseTree(doc)
	if treeErr == nil && hasLone(tree) {
		return false // goja's JSON.parse makes lone surrogates U+FFFD
	}
	got, err := parseJS(c.vm, doc)
	want, gojaErr := c.parse(goja.Undefined(), c.vm.ToValue(doc))
	if (err == nil) != (treeErr == nil) {
		t.Fatalf("%.80q: parseJS error %v, tree error %v", doc, err, treeErr)
	}
	if gojaErr != nil && err == nil && strings.Contains(gojaErr.Error(), "cannot unmarshal number") {
		return false // 1e400: goja refuses what JavaScript reads as Infinity
	}
	if err != nil && gojaErr == nil && strings.Contains(err.Error(), "nested too deeply") {
		return false // goja's JSON.parse has no depth bound; encoding/json's is ours
	}
	if (err == nil) != (gojaErr == nil) {
		t.Fatalf("%.80q: parseJS error %v, JSON.parse error %v", doc, err, gojaErr)
	}
	if err != nil {
		return true
	}
	diff, derr := c.same(goja.Undefined(), got, want, c.vm.ToValue("args"))
	require.NoError(t, derr)
	if diff.String() != "" {
		t.Fatalf("%.80q: parseJS and JSON.parse differ: %s", doc, diff)
	}
	return true
}

func TestParseJSMatchesJSONParse(t *testing.T) {
	c := newJSChecker(t)
	for _, doc := range append(append([]string{}, validDocs...), invalidDocs...) {
		c.check(t, doc)
	}
}

// TestParseJSBeyondGoja covers what goja's JSON.parse gets wrong and
// parseJS gets right, as JavaScript engines do.
func TestParseJSBeyondGoja(t *testing.T) {
	vm := goja.New()
	check := func(doc, expr string) {
		t.Helper()
		v, err := parseJS(vm, doc)
		require.NoError(t, err, doc)
		require.NoError(t, vm.Set("v", v))
		res, err := vm.RunString(expr)
		require.NoError(t, err, expr)
		require.True(t, res.ToBoolean(), "%s: %s", doc, expr)
	}
	// Lone surrogates are kept, and JSON.stringify escapes them again.
	check(`"\ud800"`, `v.length === 1 && v.charCodeAt(0) === 0xd800 && JSON.stringify(v) === '"\\ud800"'`)
	check(`"a\udc00\ud83d\ude00\ud83d"`, `v.length === 5 && v.charCodeAt(1) === 0xdc00 && v.codePointAt(2) === 0x1f600 && v.charCodeAt(4) === 0xd83d`)
	check(`["\ud800", {"k": "x\udfff"}]`, `v[0].charCodeAt(0) === 0xd800 && v[1].k.charCodeAt(1) === 0xdfff`)
	// Numbers beyond float64 are Infinity.
	check(`[1e400, -1e400, 1e-400]`, `v[0] === Infinity && v[1] === -Infinity && Object.is(v[2], 0)`)
	// A name with a lone surrogate: goja's Go API takes keys as UTF-8, so
	// it becomes U+FFFD (as JSON.parse does in goja).
	check(`{"\ud800": 1}`, `v["\ufffd"] === 1`)
}

// FuzzParseJSON holds the parser to encoding/json and to goja's JSON.parse
// on any input.
func FuzzParseJSON(f *testing.F) {
	for _, doc := range validDocs {
		if len(doc) < 4096 {
			f.Add([]byte(doc))
		}
	}
	for _, doc := range invalidDocs {
		if len(doc) < 4096 {
			f.Add([]byte(doc))
		}
	}
	for _, doc := range []string{`{"a":"\ud800"}`, "\"\xff\"", `[1e400]`, `{"a":1,"a":2}`, `"\u0000"`} {
		f.Add([]byte(doc))
	}
	var c *jsChecker
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstEncodingJSON(t, data)
		if c == nil {
			c = newJSChecker(t)
		}
		c.check(t, string(data))
	})
}

func BenchmarkParseJSON(b *testing.B) {
	doc := string(carry200Args())
	vm := goja.New()
	parse, _ := goja.AssertFunction(vm.Get("JSON").(*goja.Object).Get("parse"))
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if _, err := parseJSONWith[struct{}](doc, nopSink{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parseJS", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(doc)))
		defer cpuMeter(b)()
		for b.Loop() {
			if _, err := parseJS(vm, doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("JSON.parse", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(doc)))
		defer cpuMeter(b)()
		for b.Loop() {
			if _, err := parse(goja.Undefined(), vm.ToValue(doc)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nopSink builds nothing: the scanner alone.
type nopSink struct{}

func (nopSink) null() struct{}                        { return struct{}{} }
func (nopSink) boolean(bool) struct{}                 { return struct{}{} }
func (nopSink) number(float64) struct{}               { return struct{}{} }
func (nopSink) str(jsonStr) struct{}                  { return struct{}{} }
func (nopSink) array([]struct{}) struct{}             { return struct{}{} }
func (nopSink) object([]jsonStr, []struct{}) struct{} { return struct{}{} }

func TestJSONDeeperThan(t *testing.T) {
	for _, c := range []struct {
		doc  string
		max  int
		want bool
	}{
		{`[[1]]`, 1, true},
		{`[[1]]`, 2, false},
		{`[{"a":[]}]`, 2, true},
		{`[{"a":"[[[[[[[[[["}]`, 2, false},
		{`["\"[[[[[[[", "\\", [[[]]]]`, 3, true},
		{`["\"[[[[[[[", "\\", [[[]]]]`, 4, false},
		{`["\\\"[[[[[[[[[[[[[[[[[[[[[["]`, 1, false},
		{`{"a":{"b":{"c":{}}},"d":[[[]]]}`, 3, true},
		{`{"a":{"b":{"c":{}}},"d":[[[]]]}`, 4, false},
	} {
		require.Equal(t, c.want, jsonDeeperThan([]byte(c.doc), c.max), "%s max %d", c.doc, c.max)
	}
	require.False(t, jsonDeeperThan([]byte(nested("[", "]", maxJSONDepth)), maxJSONDepth))
	require.True(t, jsonDeeperThan([]byte(nested("[", "]", maxJSONDepth+1)), maxJSONDepth))
	require.False(t, jsonDeeperThan([]byte(`"`+strings.Repeat("[", 3*maxJSONDepth)+`"`), maxJSONDepth))
}
