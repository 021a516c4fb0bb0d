package webhook

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// Template limits. A template is parsed when its trigger is saved and
// executed per delivery, so its cost must be bounded by its shape: it
// may not nest a range in a range, range over a literal number, or
// define and call templates, which leaves work linear in the payload;
// the output and the time are capped on top of that. The time is wall
// time, so its cap is a backstop well above what any allowed template
// takes: on a machine starved of CPU a goroutine may wait tens of
// milliseconds for a core, and a delivery must not fail for that.
const (
	MaxTemplateLen        = 4 << 10
	TemplateOutputDefault = 256 << 10
	TemplateTimeDefault   = time.Second
)

// Template is a parsed message or session_id template.
type Template struct {
	name string
	t    *template.Template
}

// Data is what a template sees: {{.payload}}, {{.event}}, {{.action}},
// {{.delivery}} and {{.trigger}} (the trigger's name).
type Data struct {
	Payload  any
	Event    string
	Action   string
	Delivery string
	Trigger  string
}

var funcs = template.FuncMap{"slug": Slug}

// ParseTemplate parses text as the template called name ("message",
// "session_id") and checks that it keeps within the limits. A missing
// key of the payload is an error when it executes, so a template that
// names a field the payload lacks fails the delivery instead of
// rendering "<no value>".
func ParseTemplate(name, text string) (*Template, error) {
	if len(text) > MaxTemplateLen {
		return nil, fmt.Errorf("%s template is %d bytes; at most %d", name, len(text), MaxTemplateLen)
	}
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s template: %w", name, err)
	}
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("%s template: define and block are not allowed", name)
	}
	if t.Tree != nil && t.Tree.Root != nil {
		if err := checkNode(t.Tree.Root, 0); err != nil {
			return nil, fmt.Errorf("%s template: %w", name, err)
		}
	}
	return &Template{name: name, t: t}, nil
}

func checkNode(n parse.Node, ranges int) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c, ranges); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return errors.New("{{template}} is not allowed")
	case *parse.RangeNode:
		if ranges > 0 {
			return errors.New("a range inside a range is not allowed")
		}
		if p := n.Pipe; p != nil && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
			if _, ok := p.Cmds[0].Args[0].(*parse.NumberNode); ok {
				return errors.New("range over a number is not allowed")
			}
		}
		if err := checkNode(n.List, ranges+1); err != nil {
			return err
		}
		return checkNode(n.ElseList, ranges)
	case *parse.IfNode:
		if err := checkNode(n.List, ranges); err != nil {
			return err
		}
		return checkNode(n.ElseList, ranges)
	case *parse.WithNode:
		if err := checkNode(n.List, ranges); err != nil {
			return err
		}
		return checkNode(n.ElseList, ranges)
	}
	return nil
}

// Execute renders the template for one delivery, within limit bytes of
// output and d of time (zero: the defaults).
func (t *Template) Execute(data Data, limit int, d time.Duration) (string, error) {
	if limit <= 0 {
		limit = TemplateOutputDefault
	}
	if d <= 0 {
		d = TemplateTimeDefault
	}
	w := &boundedWriter{limit: limit, deadline: time.Now().Add(d)}
	err := t.t.Execute(w, map[string]any{
		"payload": data.Payload, "event": data.Event, "action": data.Action,
		"delivery": data.Delivery, "trigger": data.Trigger,
	})
	switch {
	case errors.Is(err, errTooLong):
		return "", fmt.Errorf("%s template: the output passed %d bytes", t.name, limit)
	case errors.Is(err, errTooSlow):
		return "", fmt.Errorf("%s template: took longer than %s", t.name, d)
	case err != nil:
		return "", err
	}
	if time.Now().After(w.deadline) {
		return "", fmt.Errorf("%s template: took longer than %s", t.name, d)
	}
	return w.b.String(), nil
}

var (
	errTooLong = errors.New("template output too long")
	errTooSlow = errors.New("template too slow")
)

// boundedWriter fails a write past its limit or its deadline, which ends
// the template's execution.
type boundedWriter struct {
	b        strings.Builder
	limit    int
	deadline time.Time
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.limit {
		return 0, errTooLong
	}
	if time.Now().After(w.deadline) {
		return 0, errTooSlow
	}
	return w.b.Write(p)
}

// slugMax is the longest session id.
const slugMax = 64

// Slug makes any value a valid session id: lower case letters, digits,
// '-' and '_', runs of anything else turned into one '-', trimmed of
// '-' at either end, at most 64 long ("acme/Web App#12" ->
// "acme-web-app-12").
func Slug(v any) string {
	s := fmt.Sprint(v)
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-'
		if !ok {
			if b.Len() > 0 && !dash {
				b.WriteByte('-')
				dash = true
			}
			continue
		}
		b.WriteRune(r)
		dash = r == '-'
		if b.Len() >= slugMax {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}
