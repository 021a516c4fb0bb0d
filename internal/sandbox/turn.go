package sandbox

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/dop251/goja"

	"github.com/agentfleet/agentfleet"
)

// scriptName is the file name the model's script compiles under; error
// positions are reported only for frames in it.
const scriptName = "script.js"

// maxErrMessage caps an error message shown to the model (a script can
// throw a megabyte string). The process sends up to maxErrWire of it: the
// parent redacts before it cuts to maxErrMessage, so that the cut never
// splits a secret it could not recognize.
const (
	maxErrMessage = 4 << 10
	maxErrWire    = 4 * maxErrMessage
)

// runTurn executes one exec request on the spare runtime. The deadline
// timer and the heap watcher stay armed until the result, error messages
// included, is fully built: formatting a thrown value can run script code
// (getters, toJSON).
func (s *childServer) runTurn(ctl *turnCtl, m *execMsg) resultMsg {
	env := s.spare
	s.spare = nil
	if env == nil {
		env = s.newEnv()
	}
	t := env.t
	t.ctl = ctl
	t.prims = m.prims
	t.apis, t.mcps = splitMCP(parseModuleTable(m.tools))
	s.logs.reset(s.spec.logBytes)
	env.restrict(m.prims)

	t.cpu = startCPUBudget(s.spec.cpu, func() { ctl.stop(stopTimeout) })
	stopHeap := s.watchHeap(ctl)
	ctl.attach(env.vm)

	res := t.run(m)

	stopHeap()
	t.cpu.stop()
	res.seq = m.seq
	res.cpu = processCPU()
	res.logHead, res.logTail, res.logCut = s.logs.parts()
	res.errMsg, res.errCut = clipMessage(res.errMsg, maxErrWire)
	return res
}

func (t *turnState) run(m *execMsg) (res resultMsg) {
	// m.args aliases the request frame's buffer, which the reply to a
	// host call reuses: take the one copy the parser works on (its
	// strings without escapes are substrings of it) first.
	argsDoc := string(m.args)
	m.args = nil
	defer func() {
		// A Go panic escaping goja is a bug in a primitive; report it as
		// the turn's failure rather than crash the process.
		if x := recover(); x != nil {
			res = resultMsg{errKind: kindCode(agentfleet.ScriptException), errMsg: fmt.Sprintf("internal sandbox error: %v", x)}
		}
	}()
	vm := t.env.vm
	prg, err := goja.Compile(scriptName, m.script, false)
	if err != nil {
		return failure(agentfleet.ScriptSyntax, syntaxMessage(err))
	}
	if _, err := vm.RunProgram(prg); err != nil {
		return t.fail(err, "")
	}
	fn := vm.Get("run")
	runFn, ok := goja.AssertFunction(fn)
	if !ok {
		if fn == nil || goja.IsUndefined(fn) {
			return failure(agentfleet.ScriptSyntax, "the script defines no run function; write: function run(args) { ... }")
		}
		return failure(agentfleet.ScriptSyntax, fmt.Sprintf("run is a %s, not a function; write: function run(args) { ... }", typeOf(fn)))
	}
	args := goja.Null()
	if len(argsDoc) > 0 {
		v, err := parseJS(vm, argsDoc)
		if err != nil {
			return failure(agentfleet.ScriptException, "the carried args are not valid JSON: "+err.Error())
		}
		args = v
	}
	v, err := runFn(goja.Undefined(), args)
	if err != nil {
		return t.fail(err, "")
	}
	if p := asPromise(v); p != nil {
		switch p.State() {
		case goja.PromiseStateFulfilled:
			v = p.Result()
		case goja.PromiseStateRejected:
			return t.failValue(p.Result(), nil, "run() rejected: ")
		default:
			return failure(agentfleet.ScriptException, "run() returned a Promise that never settled; the primitives are synchronous, so drop async/await")
		}
	}
	doc, err := t.toJSON(v)
	if err != nil {
		return t.fail(err, "the value returned by run() cannot be serialized as JSON: ")
	}
	if t.answered {
		return t.answerResult()
	}
	if len(doc) > t.s.spec.carry {
		return failure(agentfleet.ScriptLimit, fmt.Sprintf(
			"run() returned %s of JSON; the limit for the value carried to the next turn is %s. Return less: keep only the fields and items the next turn needs (filter, summarize, or page through the data across turns)",
			formatBytes(int64(len(doc))), formatBytes(int64(t.s.spec.carry))))
	}
	if jsonDeeperThan(doc, maxJSONDepth) {
		// The next turn could not read it (nor encoding/json on the Go
		// side): refuse it now, while the model can still do otherwise.
		return failure(agentfleet.ScriptLimit, fmt.Sprintf(
			"run() returned a value nested more than %d levels deep, more than the next turn can read; return something flatter", maxJSONDepth))
	}
	return resultMsg{ret: doc}
}

var promiseType = reflect.TypeOf((*goja.Promise)(nil))

// asPromise returns v as a Promise (an async run), without exporting
// anything else: Export of an ordinary return value would copy it whole.
func asPromise(v goja.Value) *goja.Promise {
	if o, ok := v.(*goja.Object); ok && o.ExportType() == promiseType {
		p, _ := o.Export().(*goja.Promise)
		return p
	}
	return nil
}

func failure(kind agentfleet.ScriptErrorKind, msg string) resultMsg {
	return resultMsg{errKind: kindCode(kind), errMsg: msg}
}

func (t *turnState) answerResult() resultMsg {
	return resultMsg{answered: true, answer: t.answer, ret: []byte("null")}
}

// fail turns an error from goja into the turn's result. prefix says what
// was being done when it is not running the script itself.
func (t *turnState) fail(err error, prefix string) resultMsg {
	if t.answered {
		return t.answerResult()
	}
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		reason := stopReason(t.ctl.reason.Load())
		if r, ok := ie.Value().(stopReason); ok && reason == stopNone {
			reason = r
		}
		return t.stopped(reason, atPos(ie.Stack()))
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return t.finish(failure(agentfleet.ScriptException, prefix+"RangeError: Maximum call stack size exceeded"+atPos(so.Stack())))
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return t.failValue(ex.Value(), ex.Stack(), prefix)
	}
	return t.finish(failure(agentfleet.ScriptException, prefix+err.Error()))
}

// stopped reports an interrupted turn by why it was stopped; pos is where.
func (t *turnState) stopped(reason stopReason, pos string) resultMsg {
	l := t.s.limits
	switch reason {
	case stopTimeout:
		return failure(agentfleet.ScriptTimeout, fmt.Sprintf("the script used its CPU time limit of %s and was stopped%s; look for a loop that does not end, or do less per turn", shortDuration(l.CPUTime), pos))
	case stopMemory:
		return failure(agentfleet.ScriptMemory, fmt.Sprintf("the script exceeded the memory limit of %s and was stopped%s; hold less data at once (process it in pages, keep only needed fields)", formatBytes(l.MemoryBytes), pos))
	case stopCancelled:
		return failure(agentfleet.ScriptCancelled, "the execution was cancelled"+pos)
	case stopWallTime:
		return failure(agentfleet.ScriptTimeout, fmt.Sprintf("the turn exceeded its wall-clock time limit of %s (including fetch and ai calls) and was stopped%s", shortDuration(l.TurnTimeout), pos))
	case stopLimit:
		return failure(agentfleet.ScriptLimit, t.limitMsg)
	case stopParked:
		return failure(agentfleet.ScriptCancelled, "the turn stopped to wait for an approval"+pos)
	}
	return failure(agentfleet.ScriptException, "the script was interrupted"+pos)
}

// failValue reports an uncaught thrown value.
func (t *turnState) failValue(v goja.Value, stack []goja.StackFrame, prefix string) resultMsg {
	kind := agentfleet.ScriptException
	if obj, ok := v.(*goja.Object); ok && t.denials[obj] {
		kind = agentfleet.ScriptDenied
	}
	msg := t.valueString(v)
	msg = prefix + msg + atPos(stack) + t.hint(msg)
	return t.finish(failure(kind, msg))
}

// finish completes a failure found in goja: if a deadline, the memory
// bound or a cancel hit while its message was being built (formatting a
// thrown value runs script code, say a getter that loops), that is the
// outcome instead.
func (t *turnState) finish(r resultMsg) resultMsg {
	if reason := stopReason(t.ctl.reason.Load()); reason > stopAnswered && !t.answered {
		return t.stopped(reason, "")
	}
	return r
}

// valueString renders a thrown value: "Name: message" for errors, JSON
// for other objects, the value itself otherwise. It runs script code
// (getters, toJSON) and so recovers from anything that code does.
func (t *turnState) valueString(v goja.Value) (s string) {
	defer func() {
		if x := recover(); x != nil {
			s = "uncaught exception (its value could not be formatted)"
		}
	}()
	obj, ok := v.(*goja.Object)
	if !ok {
		if v == nil {
			return "undefined"
		}
		return "Uncaught " + v.String()
	}
	if obj.ClassName() == "Error" {
		return t.errorString(obj)
	}
	doc, err := t.toJSON(obj)
	if err != nil {
		return "Uncaught " + obj.String()
	}
	return "Uncaught " + string(doc)
}

func (t *turnState) errorString(obj *goja.Object) string {
	name, msg := "Error", ""
	if n := obj.Get("name"); n != nil && !goja.IsUndefined(n) {
		name = n.String()
	}
	if m := obj.Get("message"); m != nil && !goja.IsUndefined(m) {
		msg = m.String()
	}
	if msg == "" {
		return name
	}
	return name + ": " + msg
}

var notDefined = regexp.MustCompile(`^ReferenceError: ([\w$]+) is not defined`)

// hint adds what the model needs to know to an error it may misread.
func (t *turnState) hint(msg string) string {
	if m := notDefined.FindStringSubmatch(msg); m != nil {
		name := m[1]
		if name == "require" {
			return " (no require() modules are enabled for this agent)"
		}
		if p, ok := primByName[name]; ok && !t.prims.has(p) {
			return fmt.Sprintf(" (the primitive %s is not enabled for this agent; enabled: %s)", name, strings.Join(t.prims.names(), ", "))
		}
	}
	return ""
}

// atPos renders the innermost position in the script, " (line 3:9)".
func atPos(stack []goja.StackFrame) string {
	for i := range stack {
		f := &stack[i]
		if f.SrcName() != scriptName {
			continue
		}
		if p := f.Position(); p.Line > 0 {
			return fmt.Sprintf(" (line %d:%d)", p.Line, p.Column)
		}
	}
	return ""
}

var parserError = regexp.MustCompile(`^(?:[^:]*: )?Line (\d+):(\d+) (.*?)(?: \(and \d+ more errors\))?$`)

// syntaxMessage cleans a compile error to "SyntaxError: what (line L:C)".
func syntaxMessage(err error) string {
	var se *goja.CompilerSyntaxError
	if errors.As(err, &se) {
		if se.File != nil {
			p := se.File.Position(se.Offset)
			return fmt.Sprintf("SyntaxError: %s (line %d:%d)", se.Message, p.Line, p.Column)
		}
		if m := parserError.FindStringSubmatch(se.Message); m != nil {
			return fmt.Sprintf("SyntaxError: %s (line %s:%s)", m[3], m[1], m[2])
		}
		return "SyntaxError: " + se.Message
	}
	return strings.ReplaceAll(err.Error(), scriptName+":", "line ")
}

// errMessage is the message of a goja error without goja's stack suffix.
func errMessage(err error) string {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		if v := ex.Value(); v != nil {
			if obj, ok := v.(*goja.Object); ok {
				if m := obj.Get("message"); m != nil && !goja.IsUndefined(m) {
					return m.String()
				}
			}
			return v.String()
		}
	}
	return err.Error()
}

// clipMessage cuts s to at most max bytes, at a rune boundary, and says
// how many it dropped.
func clipMessage(s string, max int) (string, int) {
	if len(s) <= max {
		return s, 0
	}
	kept := string(trimPartialRune([]byte(s[:max])))
	return kept, len(s) - len(kept)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// typeOf is JavaScript's typeof, for messages.
func typeOf(v goja.Value) string {
	if goja.IsNull(v) {
		return "null"
	}
	if _, ok := v.(*goja.Object); ok {
		return "object"
	}
	if t := v.ExportType(); t != nil {
		switch t.Kind() {
		case reflect.String:
			return "string"
		case reflect.Bool:
			return "boolean"
		case reflect.Int64, reflect.Float64:
			return "number"
		}
	}
	return "value"
}
