package sandbox

import (
	"reflect"

	"github.com/dop251/goja"
)

// utf16StringType is the type of goja strings held as UTF-16, which
// can hold lone surrogates; others (ASCII, or imported from Go) cannot.
var utf16StringType = reflect.TypeOf(goja.StringFromUTF16([]uint16{0xe9}))

// jsSink builds, from parsed JSON, the same values JSON.parse makes:
// ordinary arrays and objects (no Go-backed wrappers, so everything a
// script does to them behaves as it does on any object), strings and
// numbers.
//
// Lazy wrappers (goja's DynamicObject and DynamicArray over the parsed
// values) were measured too: for 200 objects {id, name, price, tags[2]}
// they cost about 0.2 ms of CPU to make instead of 0.55, because every
// native goja object costs a Go map (an array too, for its length). They
// were rejected because they cannot behave like plain objects: for them
// goja refuses Object.freeze and seal, accessors, non-writable or
// non-enumerable properties, symbol keys and named properties on arrays
// (with TypeErrors a model could not make sense of), and an array cannot
// have holes.
type jsSink struct {
	vm    *goja.Runtime
	items []any // scratch for NewArray
}

func (s *jsSink) null() goja.Value            { return goja.Null() }
func (s *jsSink) boolean(b bool) goja.Value   { return s.vm.ToValue(b) }
func (s *jsSink) number(f float64) goja.Value { return s.vm.ToValue(f) }

func (s *jsSink) str(v jsonStr) goja.Value {
	if v.lone {
		return goja.StringFromUTF16(wtf8ToUTF16(v.s))
	}
	return s.vm.ToValue(v.s)
}

func (s *jsSink) array(elems []goja.Value) goja.Value {
	items := s.items[:0]
	for _, e := range elems {
		items = append(items, e)
	}
	a := s.vm.NewArray(items...)
	clear(items)
	s.items = items[:0]
	return a
}

// object defines the members as JSON.parse does (CreateDataProperty): a
// setter on Object.prototype is not called and "__proto__" is an own
// property. A duplicate name keeps its first position and its last
// value.
func (s *jsSink) object(keys []jsonStr, vals []goja.Value) goja.Value {
	o := s.vm.NewObject()
	for i, k := range keys {
		_ = o.DefineDataProperty(k.utf8Key(), vals[i], goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
	}
	return o
}

// parseJS parses a JSON document into JavaScript values, as JSON.parse
// would, only several times faster.
func parseJS(vm *goja.Runtime, doc string) (goja.Value, error) {
	return parseJSONWith[goja.Value](doc, &jsSink{vm: vm})
}
