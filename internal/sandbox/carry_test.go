package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// The carried args reach run() as ordinary JavaScript values: everything
// a script does to a parsed object works as on any object.
func TestCarriedArgsBehaveLikePlainValues(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	args := `{"z":1,"items":[{"id":1,"tags":["a","b"]},{"id":2,"tags":[]}],"a":{"y":2,"x":3},"10":"ten","2":"two","n":-0,"__proto__":{"p":1},"s":"é\ud83d\ude00"}`
	script := `function run(args) {
  const checks = {};
  const check = (name, ok) => { checks[name] = ok === true };
  check("order", JSON.stringify(Object.keys(args)) === '["2","10","z","items","a","n","__proto__","s"]');
  const seen = []; for (const k in args.a) seen.push(k);
  check("for-in order", seen.join() === "y,x");
  check("identity", args.items === args.items && args.items[0] === args.items[0]);
  check("isArray", Array.isArray(args.items) && Array.isArray(args.items[0].tags) && !Array.isArray(args.a));
  check("instanceof", args.items instanceof Array && args.a instanceof Object);
  check("typeof", typeof args === "object" && typeof args.z === "number" && typeof args.s === "string" && typeof args.items === "object");
  check("prototype", Object.getPrototypeOf(args.a) === Object.prototype && Object.getPrototypeOf(args.items) === Array.prototype);
  check("in", "z" in args && !("missing" in args) && 0 in args.items && !(5 in args.items));
  check("hasOwnProperty", args.hasOwnProperty("z") && Object.prototype.hasOwnProperty.call(args, "__proto__"));
  check("__proto__ is own data", Object.getPrototypeOf(args) === Object.prototype && args.__proto__.p === 1 && ({}).p === undefined);
  check("-0", Object.is(args.n, -0));
  check("string", args.s.length === 3 && args.s.codePointAt(1) === 0x1f600);
  check("spread", JSON.stringify({...args.a, w: 4}) === '{"y":2,"x":3,"w":4}' && [...args.items[0].tags, "c"].join() === "a,b,c");
  check("destructure", (({y, x}) => y * 10 + x)(args.a) === 23);
  check("entries", JSON.stringify(Object.entries(args.a)) === '[["y",2],["x",3]]');
  // Mutation.
  args.a.w = 4; delete args.a.y; args.a.y = 5;
  check("add/delete order", Object.keys(args.a).join() === "x,w,y");
  const tags = args.items[0].tags;
  tags.push("c"); check("push", tags.length === 3 && tags[2] === "c");
  check("pop", tags.pop() === "c" && tags.length === 2);
  tags.splice(1, 0, "x", "y"); check("splice", tags.join() === "a,x,y,b");
  tags.length = 2; check("length", tags.join() === "a,x");
  tags[4] = "e"; check("holes", tags.length === 5 && !(3 in tags) && JSON.stringify(tags) === '["a","x",null,null,"e"]');
  tags.length = 2;
  check("sort", args.items.map(it => it.id).sort((a, b) => b - a).join() === "2,1");
  check("map/filter/reduce", args.items.filter(it => it.id > 1).map(it => it.id * 2)[0] === 4 && args.items.reduce((s, it) => s + it.id, 0) === 3);
  check("reverse in place", args.items.slice().reverse()[0].id === 2 && args.items[0].id === 1);
  tags.extra = "named"; check("named property on array", tags.extra === "named" && JSON.stringify(tags) === '["a","x"]');
  // Attributes, freezing, accessors, symbols.
  Object.defineProperty(args.a, "hidden", {value: 1, enumerable: false});
  check("non-enumerable", args.a.hidden === 1 && !Object.keys(args.a).includes("hidden"));
  Object.defineProperty(args.a, "g", {get() { return 42 }, enumerable: true});
  check("accessor", args.a.g === 42);
  const sym = Symbol("s"); args.a[sym] = 1; check("symbol key", args.a[sym] === 1);
  const frozen = Object.freeze(args.items[1]);
  check("freeze", Object.isFrozen(frozen) && (() => { "use strict"; try { frozen.id = 9; return false } catch (e) { return e instanceof TypeError } })());
  Object.seal(args.items); check("seal", Object.isSealed(args.items));
  return {checks, round: args};
}`
	res := run(t, p, script, args)
	out := ok(t, res)
	require.NotContains(t, out, "false", out)
	require.Equal(t, 30, strings.Count(out, ":true"), out)
	require.JSONEq(t, `{"z":1,"items":[{"id":1,"tags":["a","x"]},{"id":2,"tags":[]}],"a":{"x":3,"w":4,"y":5,"g":42},"10":"ten","2":"two","n":0,"__proto__":{"p":1},"s":"é😀"}`,
		out[strings.Index(out, `"round":`)+len(`"round":`):len(out)-1])
}

// The args are parsed as JSON.parse does, not as assignments: setters a
// script puts on Object.prototype before run() are not called.
func TestCarriedArgsIgnorePrototypeSetters(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	script := `let called = false;
Object.defineProperty(Object.prototype, "x", {set(v) { called = true }, get() { return "inherited" }});
function run(args) { return {called, own: Object.prototype.hasOwnProperty.call(args, "x"), x: args.x} }`
	require.JSONEq(t, `{"called":false,"own":true,"x":1}`, ok(t, run(t, p, script, `{"x":1}`)))
}

// What JSON can carry survives a round trip through a turn exactly, in
// order, with JSON.stringify's number formatting.
func TestCarriedArgsRoundTrip(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	for _, c := range []struct{ in, out string }{
		{`{"b":1,"a":2,"b":3}`, `{"b":3,"a":2}`},
		{`[1e21,1e-7,123456789012345678901234567890,-0,0.1,5e-324,1.7976931348623157e308,100,1E2,2.50]`,
			`[1e+21,1e-7,1.2345678901234568e+29,0,0.1,5e-324,1.7976931348623157e+308,100,100,2.5]`},
		{`[9007199254740993,-9007199254740993,12345678901234567890]`, `[9007199254740992,-9007199254740992,12345678901234567000]`},
		{`[1e400,-1e400]`, `[null,null]`},
		{`"\u00e9\ud83d\ude00\u2028\u0000\u001f\"\\\/"`, `"é😀` + "\u2028" + `\u0000\u001f\"\\/"`},
		{`["\ud800","x\udfffy"]`, `["\ud800","x\udfffy"]`},
		{`{"é":{"":[[],{}]}}`, `{"é":{"":[[],{}]}}`},
		{` { "a" : [ 1 , 2 ] } `, `{"a":[1,2]}`},
		{`null`, `null`},
		{`"s"`, `"s"`},
	} {
		require.Equal(t, c.out, ok(t, run(t, p, `function run(args) { return args }`, c.in)), c.in)
	}
	// Nesting up to the bound of encoding/json, which reads carried state
	// on the Go side too.
	deep := nested("[", "]", maxJSONDepth)
	require.Equal(t, "true", ok(t, run(t, p, `function run(a) { let d = 0; while (Array.isArray(a)) { a = a[0]; d++ } return d === 10000 }`, deep)))
}

func TestCarriedArgsInvalid(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	msg := failed(t, run(t, p, `function run(args) { return 1 }`, `{"a":1,}`), agentfleet.ScriptException)
	require.Equal(t, `the carried args are not valid JSON: unexpected character '}' in object (expected a property name in double quotes) at offset 7`, msg)
	msg = failed(t, run(t, p, `function run(args) { return 1 }`, nested("[", "]", maxJSONDepth+1)), agentfleet.ScriptException)
	require.Contains(t, msg, "nested too deeply")
}

// What the next turn could not read is refused when it is returned.
func TestCarriedValueTooDeep(t *testing.T) {
	t.Parallel()
	// Building and encoding 10,000 levels takes seconds of CPU under
	// -race, not far from the default CPU limit of 5s, which this test
	// is not about.
	p := newPool(t, Config{PoolSize: 1, Limits: Limits{CPUTime: time.Minute}})
	deep := `function deep(n) { let v = 1; for (let i = 0; i < n; i++) v = i % 2 ? [v] : {v}; return v }
`
	res := run(t, p, deep+`function run() { return deep(10000) }`, "")
	ok(t, res)
	_, err := parseTree(string(res.Return))
	require.NoError(t, err)
	msg := failed(t, run(t, p, deep+`function run() { return deep(10001) }`, ""), agentfleet.ScriptLimit)
	require.Equal(t, "run() returned a value nested more than 10000 levels deep, more than the next turn can read; return something flatter", msg)
	msg = failed(t, run(t, p, deep+`function run() { answer(deep(10001)) }`, ""), agentfleet.ScriptLimit)
	require.Equal(t, "answer() got a value nested more than 10000 levels deep; answer with something flatter", msg)
}
