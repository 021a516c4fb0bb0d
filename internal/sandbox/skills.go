// skillList() and skillGet(): a script's reads of its tenant's skills
// (DESIGN.md section 20), served by the caller's agentfleet.SkillLibrary
// in the parent.

package sandbox

import (
	"context"
	"encoding/json"

	"github.com/agentfleet/agentfleet"
	"github.com/dop251/goja"
)

// The declarations of skillList and skillGet, which the prompt's skills
// catalog shows (an agent without skills has neither).
const (
	SkillListDecl = "declare function skillList(query?: string): {name: string; description: string; score: number}[]; // your skills, best match for query first (by name without one)"
	SkillGetDecl  = "declare function skillGet(name: string): string; // a skill's body: markdown, its recipe"
)

// skillSet is the skill primitives, enabled together.
const skillSet = primSet(1<<primSkillList | 1<<primSkillGet)

type skillArgs struct {
	Query string `json:"query,omitempty"`
	Name  string `json:"name,omitempty"`
}

func (t *turnState) skillListFn(c goja.FunctionCall) goja.Value {
	var a skillArgs
	if q := c.Argument(0); !goja.IsUndefined(q) && !goja.IsNull(q) {
		a.Query = q.String()
	}
	args, _ := json.Marshal(a)
	return t.parseJSON(t.host(primSkillList, args))
}

func (t *turnState) skillGetFn(c goja.FunctionCall) goja.Value {
	if goja.IsUndefined(c.Argument(0)) {
		t.throw("TypeError", "skillGet: give a skill's name (skillList() names them)")
	}
	args, _ := json.Marshal(skillArgs{Name: c.Argument(0).String()})
	var body string
	if err := json.Unmarshal(t.host(primSkillGet, args), &body); err != nil {
		t.throw("Error", "skillGet: bad reply from host: "+err.Error())
	}
	return t.env.vm.ToValue(body)
}

// skillCall runs skillList or skillGet on lib.
func skillCall(ctx context.Context, lib agentfleet.SkillLibrary, pr prim, raw []byte) (byte, []byte) {
	name := prims[pr].name
	if lib == nil {
		return hostErr("%s() is not available for this run: its agent has no skills", name)
	}
	var a skillArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return hostErr("%s: bad arguments: %v", name, err)
	}
	var v any
	var err error
	if pr == primSkillList {
		v, err = lib.SkillList(ctx, a.Query, 0)
	} else {
		v, err = lib.SkillGet(ctx, a.Name)
	}
	if err != nil {
		return hostErr("%s: %v", name, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return hostErr("%s: %v", name, err)
	}
	return hostOK, out
}
