package sandbox

import (
	"fmt"
	"strings"
)

// An agent's approve list names the host primitive calls that need a
// person's yes (DESIGN §12):
//
//	"*"           every call of a host primitive but wait
//	"fetch", "http", "ai", "aiJSON", "spawn"   every call of that primitive
//	"http.get", "http.post", "http.put", "http.del"   that method of the http module
//	"fetch:POST"  fetch with that method (upper case; fetch's default is GET)
//
// CheckApprove validates such a list when the agent is saved;
// ApproveMatch is the rule a call meets.

// httpMethods maps the http module's functions to their methods.
var httpMethods = map[string]string{"get": "GET", "post": "POST", "put": "PUT", "del": "DELETE"}

// CheckApprove reports the entries of an approve list that are not rules.
func CheckApprove(rules []string) error {
	for _, r := range rules {
		if _, _, err := parseApprove(r); err != nil {
			return err
		}
	}
	return nil
}

// ApproveMatch returns the first of rules a call of primitive with method
// (for fetch and http, upper case; "" otherwise) meets.
func ApproveMatch(rules []string, primitive, method string) (string, bool) {
	for _, r := range rules {
		prim, m, err := parseApprove(r)
		if err != nil {
			continue
		}
		if (prim == "*" && primitive != "wait") || prim == primitive && (m == "" || m == method) {
			return r, true
		}
	}
	return "", false
}

// parseApprove splits a rule into its primitive and method ("" for any).
func parseApprove(rule string) (prim, method string, err error) {
	if rule == "*" {
		return "*", "", nil
	}
	switch name, fn, ok := strings.Cut(rule, "."); {
	case ok && name == "http":
		if m, known := httpMethods[fn]; known {
			return "http", m, nil
		}
		return "", "", fmt.Errorf("approve rule %q: the http module has get, post, put and del (\"http.post\")", rule)
	}
	if name, m, ok := strings.Cut(rule, ":"); ok {
		if name != "fetch" || m == "" || strings.ContainsFunc(m, func(r rune) bool { return r < 'A' || r > 'Z' }) {
			return "", "", fmt.Errorf("approve rule %q: a method is written after fetch, in upper case (\"fetch:POST\")", rule)
		}
		return "fetch", m, nil
	}
	if p, ok := primByName[rule]; ok && prims[p].host && p != primWait {
		return rule, "", nil
	}
	return "", "", fmt.Errorf("approve rule %q is not a rule: use \"*\", a host primitive (fetch, http, ai, aiJSON, spawn), \"http.post\" (get, post, put, del) or \"fetch:POST\"", rule)
}
