package llm

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// demoScript is one demo task played over several turns. Only the first
// turn depends on the task (it fixes the parameters as literals in the
// code); later turns work from the carried args, as a real model's would.
type demoScript struct {
	name     string
	keywords []string
	first    func(task string) (prose, js string)
	rest     []demoTurn
}

type demoTurn struct{ prose, js string }

func (s demoScript) turns() int { return 1 + len(s.rest) }

// step is the reply for the turn after done turns of s.
func (s demoScript) step(done int, task string) string {
	var t demoTurn
	if done == 0 {
		t.prose, t.js = s.first(task)
	} else {
		t = s.rest[done-1]
	}
	return demoCode(fmt.Sprintf("[demo model: %s %d/%d] %s", s.name, done+1, s.turns(), t.prose), t.js)
}

// pickDemoScript chooses by keywords, first match in list order.
func pickDemoScript(task string) demoScript {
	lower := strings.ToLower(task)
	for _, s := range demoScripts {
		for _, k := range s.keywords {
			if strings.Contains(lower, k) {
				return s
			}
		}
	}
	return genericDemo
}

func demoScriptNamed(name string) (demoScript, bool) {
	for _, s := range append(demoScripts[:len(demoScripts):len(demoScripts)], genericDemo) {
		if s.name == name {
			return s, true
		}
	}
	return demoScript{}, false
}

// The scripts are plain ES5 (var, function expressions) so they run in any
// JavaScript engine the sandbox may use. Their logs and returned keys
// never contain what observedError takes for a failure ("failed",
// "error", "exception", a line opening with an error kind such as
// "limit:"), except the apology's, which ends the run.
var demoScripts = []demoScript{
	{
		name:     "fizzbuzz",
		keywords: []string{"fizzbuzz", "fizz buzz", "fizz-buzz"},
		first: func(task string) (string, string) {
			n := largestInt(task, 15, 1, 200)
			return fmt.Sprintf("I'll compute FizzBuzz for 1 to %d and carry the lines to the next turn.", n), `
function run(args) {
  var n = ` + strconv.Itoa(n) + `;
  var lines = [];
  for (var i = 1; i <= n; i++) {
    var s = "";
    if (i % 3 === 0) s += "Fizz";
    if (i % 5 === 0) s += "Buzz";
    lines.push(s || String(i));
  }
  log("computed " + lines.length + " lines; the first five: " + lines.slice(0, 5).join(", "));
  return { n: n, lines: lines };
}`
		},
		rest: []demoTurn{{
			prose: "The lines are ready; I'll count the Fizz and Buzz lines as a check and answer.",
			js: `
function run(args) {
  if (!args || !args.lines) throw new Error("the lines from the previous turn are missing");
  var count = function (word) {
    return args.lines.filter(function (l) { return l === word; }).length;
  };
  log("Fizz: " + count("Fizz") + ", Buzz: " + count("Buzz") + ", FizzBuzz: " + count("FizzBuzz"));
  answer("` + DemoMarker + ` FizzBuzz from 1 to " + args.n + ":\n" + args.lines.join("\n"));
}`,
		}},
	},
	{
		name:     "fibonacci",
		keywords: []string{"fibonacci"},
		first: func(task string) (string, string) {
			// 78 is the last Fibonacci number below 2^53, where
			// JavaScript numbers stop being exact integers.
			n := largestInt(task, 20, 3, 78)
			return fmt.Sprintf("I'll generate the first %d Fibonacci numbers and keep them for the next turn.", n), `
function run(args) {
  var n = ` + strconv.Itoa(n) + `;
  var seq = [0, 1];
  while (seq.length < n) seq.push(seq[seq.length - 1] + seq[seq.length - 2]);
  seq = seq.slice(0, n);
  log("computed " + seq.length + " numbers; the last is " + seq[seq.length - 1]);
  return { n: n, seq: seq };
}`
		},
		rest: []demoTurn{{
			prose: "I have the sequence; I'll check the ratio of the last two numbers and answer.",
			js: `
function run(args) {
  if (!args || !args.seq) throw new Error("the sequence from the previous turn is missing");
  var s = args.seq;
  var ratio = s[s.length - 1] / s[s.length - 2];
  log("ratio of the last two: " + ratio.toFixed(6));
  answer("` + DemoMarker + ` The first " + args.n + " Fibonacci numbers: " + s.join(", ") +
    ". The ratio of the last two, " + ratio.toFixed(6) + ", approaches the golden ratio.");
}`,
		}},
	},
	{
		name:     "primes",
		keywords: []string{"prime"},
		first: func(task string) (string, string) {
			limit := largestInt(task, 100, 10, 10000)
			return fmt.Sprintf("I'll sieve the primes up to %d first, then study them in the next turn.", limit), `
function run(args) {
  var limit = ` + strconv.Itoa(limit) + `;
  var composite = [];
  var primes = [];
  for (var i = 2; i <= limit; i++) {
    if (composite[i]) continue;
    primes.push(i);
    for (var j = i * i; j <= limit; j += i) composite[j] = true;
  }
  log("sieved up to " + limit + ": " + primes.length + " primes, the largest " + primes[primes.length - 1]);
  return { upto: limit, primes: primes };
}`
		},
		rest: []demoTurn{
			{
				prose: "Now I'll look for twin primes, the sum and the largest gap.",
				js: `
function run(args) {
  if (!args || !args.primes) throw new Error("the primes from the previous turn are missing");
  var p = args.primes, twins = 0, sum = 0, gap = { size: 0, from: 0, to: 0 };
  for (var i = 0; i < p.length; i++) {
    sum += p[i];
    if (i === 0) continue;
    var d = p[i] - p[i - 1];
    if (d === 2) twins++;
    if (d > gap.size) gap = { size: d, from: p[i - 1], to: p[i] };
  }
  log(twins + " twin-prime pairs; sum " + sum + "; largest gap " + gap.size + " (" + gap.from + " to " + gap.to + ")");
  return { upto: args.upto, count: p.length, sum: sum, twins: twins, gap: gap, first: p.slice(0, 10), last: p[p.length - 1] };
}`,
			},
			{
				prose: "I have everything I need; here is the summary.",
				js: `
function run(args) {
  if (!args || !args.count) throw new Error("the statistics from the previous turn are missing");
  answer("` + DemoMarker + ` There are " + args.count + " primes up to " + args.upto +
    " (the largest is " + args.last + "; together they sum to " + args.sum + "). " +
    args.twins + " pairs are twin primes, and the largest gap is " + args.gap.size +
    ", between " + args.gap.from + " and " + args.gap.to + ". The first ten: " + args.first.join(", ") + ".");
}`,
			},
		},
	},
	{
		name:     "wordcount",
		keywords: []string{"word count", "wordcount", "count words", "count the words", "word frequenc", "words in"},
		first: func(task string) (string, string) {
			text := demoSampleText
			if _, after, ok := strings.Cut(task, ":"); ok && strings.TrimSpace(after) != "" {
				text = strings.TrimSpace(after)
			}
			text = clipText(text, 20000)
			// Words are carried as [word, count] pairs, never as
			// object keys: the digest shows keys to the model, and
			// user words must not reach it (one might be "error").
			return "I'll split the text into words and count each one.", `
function run(args) {
  var text = ` + jsString(text) + `;
  var words = text.toLowerCase().split(/\s+/).map(function (w) {
    return w.replace(/^[.,;:!?"'()\[\]{}<>-]+|[.,;:!?"'()\[\]{}<>-]+$/g, "");
  }).filter(function (w) { return w.length > 0; });
  var counts = {};
  for (var i = 0; i < words.length; i++) {
    var k = "w:" + words[i];
    counts[k] = (counts[k] || 0) + 1;
  }
  var pairs = [];
  for (var key in counts) {
    if (Object.prototype.hasOwnProperty.call(counts, key)) pairs.push([key.slice(2), counts[key]]);
  }
  pairs.sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0); });
  log("counted " + words.length + " words, " + pairs.length + " distinct");
  return { total: words.length, distinct: pairs.length, top: pairs.slice(0, 10) };
}`
		},
		rest: []demoTurn{{
			prose: "The counts are in; I'll report the totals and the most frequent words.",
			js: `
function run(args) {
  if (!args || !args.top) throw new Error("the counts from the previous turn are missing");
  var top = args.top.slice(0, 5).map(function (p) { return p[0] + " (" + p[1] + ")"; });
  log("reporting the " + top.length + " most frequent words");
  answer("` + DemoMarker + ` " + args.total + " words, " + args.distinct + " distinct. Most frequent: " + top.join(", ") + ".");
}`,
		}},
	},
	{
		name:     "sort",
		keywords: []string{"sort"},
		first: func(task string) (string, string) {
			nums := allInts(task, 200)
			if len(nums) < 2 {
				nums = []int{42, 7, 19, 3, 88, 23, 5, 61}
			}
			list := make([]string, len(nums))
			for i, n := range nums {
				list[i] = strconv.Itoa(n)
			}
			return fmt.Sprintf("I'll sort the %d numbers numerically and check the order next turn.", len(nums)), `
function run(args) {
  var input = [` + strings.Join(list, ", ") + `];
  var sorted = input.slice().sort(function (a, b) { return a - b; });
  log("sorted " + sorted.length + " numbers; smallest " + sorted[0] + ", largest " + sorted[sorted.length - 1]);
  return { input: input, sorted: sorted };
}`
		},
		rest: []demoTurn{{
			prose: "Let me verify the order before answering.",
			js: `
function run(args) {
  if (!args || !args.sorted) throw new Error("the sorted numbers from the previous turn are missing");
  for (var i = 1; i < args.sorted.length; i++) {
    if (args.sorted[i - 1] > args.sorted[i]) throw new Error("out of order at position " + i);
  }
  log("checked: " + args.sorted.length + " numbers in ascending order");
  answer("` + DemoMarker + ` Sorted ascending: " + args.sorted.join(", "));
}`,
		}},
	},
}

// genericDemo answers any other task in one turn, saying what the demo is
// and how to use a real model.
var genericDemo = demoScript{
	name: "generic",
	first: func(task string) (string, string) {
		return "This is the offline demo model, so I can only say what I am and what I can do.", `
function run(args) {
  log("no built-in demo matches this task");
  answer("` + DemoMarker + ` I am agentfleet's offline demo model: I can only play built-in demos (try fizzbuzz, primes, fibonacci, word count or sort). " +
    "For anything else set AGENTFLEET_MODEL and OPENAI_BASE_URL / OPENAI_API_KEY to use a real model. Your task was: " + ` + jsString(clipText(task, 200)) + `);
}`
	},
}

const demoSampleText = "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the quiet forest."

var (
	unsignedInt = regexp.MustCompile(`\d+`)
	// signedInt takes a minus sign only when it does not follow a digit,
	// so "1-100" reads as 1 and 100.
	signedInt = regexp.MustCompile(`(?:^|[^0-9])(-?\d+)`)
)

// largestInt is the largest number written in task, clamped to [lo, hi],
// or def when there is none: "fizzbuzz from 1 to 30" means 30.
func largestInt(task string, def, lo, hi int) int {
	best, found := 0, false
	for _, s := range unsignedInt.FindAllString(task, -1) {
		n, err := strconv.Atoi(s)
		if err != nil {
			n = hi // too large to parse: as large as allowed
		}
		if !found || n > best {
			best, found = n, true
		}
	}
	if !found {
		return def
	}
	return min(max(best, lo), hi)
}

// allInts is every integer written in task, in order, at most limit.
func allInts(task string, limit int) []int {
	var out []int
	for _, m := range signedInt.FindAllStringSubmatch(task, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 1e15 || n < -1e15 {
			continue // not exact as a JavaScript number
		}
		if out = append(out, n); len(out) == limit {
			break
		}
	}
	return out
}
