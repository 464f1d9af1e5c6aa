// SPDX-License-Identifier: MIT

package pins

import (
	"encoding/json"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"sort"
	"strings"
)

// maxMeaning bounds the lines Meaning gives for one change (the raw diff follows them).
const maxMeaning = 32

// Meaning says in words what a quarantined change changes, most telling first: a tool new
// or removed, a parameter new or gone, a parameter now required, a type or enum changed,
// the words of a description changed. It compares the canonical forms of what was kept for
// review, so notation never shows up here. Empty when nothing kept tells the difference
// (a schema too large to keep, for one): the raw diff then is all there is.
func Meaning(c Change) []string {
	switch {
	case c.Removed:
		return []string{"tool removed: the server no longer lists it (approving forgets its pin)"}
	case c.Tool == InstructionsKey:
		return wordChange("the server's instructions", c.OldDesc, c.NewDesc)
	}
	var out []string
	if c.Old == "" {
		out = append(out, "new tool: never approved")
	}
	var oldS, newS any
	_ = json.Unmarshal([]byte(c.OldInput), &oldS)
	_ = json.Unmarshal([]byte(c.NewInput), &newS)
	if c.Old != "" {
		out = append(out, schemaMeaning("", canonSchema(oldS), canonSchema(newS))...)
		out = append(out, wordChange("description", c.OldDesc, c.NewDesc)...)
	}
	if len(out) > maxMeaning {
		out = append(out[:maxMeaning], fmt.Sprintf("... and %d more", len(out)-maxMeaning))
	}
	return out
}

// wordChange says which words of a text came and went, or nothing when its words are the
// same.
func wordChange(what, old, new string) []string {
	ow, nw := strings.Fields(Words(old)), strings.Fields(Words(new))
	if strings.Join(ow, " ") == strings.Join(nw, " ") {
		return nil
	}
	gone, came := multisetDiff(ow, nw)
	msg := what + ": its words changed"
	if len(came) > 0 {
		msg += "; added: " + clip.Bytes(strings.Join(came, " "), 200)
	}
	if len(gone) > 0 {
		msg += "; removed: " + clip.Bytes(strings.Join(gone, " "), 200)
	}
	if len(came) == 0 && len(gone) == 0 {
		msg += " (the same words in another order)"
	} else if onlyClauseMarks(came) && onlyClauseMarks(gone) {
		msg += " (only where a sentence or clause ends: read it again)"
	}
	return []string{msg}
}

// onlyClauseMarks reports whether every word of ws is clause punctuation (Words keeps it
// as a word of its own).
func onlyClauseMarks(ws []string) bool {
	for _, w := range ws {
		if strings.IndexFunc(w, func(r rune) bool { return !clause(r) }) >= 0 {
			return false
		}
	}
	return true
}

// multisetDiff is what of a is not in b and what of b is not in a, counting repeats.
func multisetDiff(a, b []string) (gone, came []string) {
	n := map[string]int{}
	for _, w := range a {
		n[w]++
	}
	for _, w := range b {
		if n[w] > 0 {
			n[w]--
		} else {
			came = append(came, w)
		}
	}
	for _, w := range a {
		if n[w] > 0 {
			n[w]--
			gone = append(gone, w)
		}
	}
	return gone, came
}

// schemaMeaning compares two canonical schemas at path (a parameter path, "" at the top).
func schemaMeaning(path string, old, new any) []string {
	om, _ := old.(map[string]any)
	nm, _ := new.(map[string]any)
	if om == nil || nm == nil {
		if !jsonEqual(old, new) {
			return []string{fmt.Sprintf("%s: was %s, now %s", where(path), short(old), short(new))}
		}
		return nil
	}
	var out []string
	oProps, _ := om["properties"].(map[string]any)
	nProps, _ := nm["properties"].(map[string]any)
	oReq, nReq := stringSet(om["required"]), stringSet(nm["required"])
	for _, name := range sortedKeys(nProps, oProps) {
		p := join(path, name)
		o, had := oProps[name]
		n, has := nProps[name]
		switch {
		case !had && nReq[name]:
			out = append(out, fmt.Sprintf("new required parameter %s (%s)", p, typeOf(n)))
		case !had:
			out = append(out, fmt.Sprintf("new optional parameter %s (%s)", p, typeOf(n)))
		case !has:
			out = append(out, fmt.Sprintf("parameter %s removed", p))
		default:
			if nReq[name] && !oReq[name] {
				out = append(out, fmt.Sprintf("parameter %s is now required", p))
			}
			if oReq[name] && !nReq[name] {
				out = append(out, fmt.Sprintf("parameter %s is no longer required", p))
			}
			out = append(out, schemaMeaning(p, o, n)...)
		}
	}
	for _, k := range sortedKeys(nm, om) {
		if k == "properties" || k == "required" {
			continue
		}
		o, n := om[k], nm[k]
		if jsonEqual(o, n) {
			continue
		}
		switch k {
		case "type":
			out = append(out, fmt.Sprintf("%s: type was %s, now %s", where(path), short(o), short(n)))
		case "enum":
			gone, came := setDiff(o, n)
			out = append(out, fmt.Sprintf("%s: allowed values changed; added %s, removed %s", where(path), orNothing(came), orNothing(gone)))
		case "description", "title":
			ot, _ := o.(string)
			nt, _ := n.(string)
			out = append(out, wordChange(where(path)+" "+k, ot, nt)...)
		case "items":
			out = append(out, schemaMeaning(join(path, "[]"), o, n)...)
		case "additionalProperties":
			out = append(out, schemaMeaning(join(path, "(other properties)"), o, n)...)
		default:
			out = append(out, fmt.Sprintf("%s: %s was %s, now %s", where(path), k, short(o), short(n)))
		}
	}
	return out
}

func where(path string) string {
	if path == "" {
		return "input"
	}
	return "parameter " + path
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func typeOf(s any) string {
	if m, ok := s.(map[string]any); ok && m["type"] != nil {
		return short(m["type"])
	}
	return "any type"
}

func short(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	return clip.Bytes(string(b), 120)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}
	list, _ := v.([]any)
	for _, e := range list {
		if s, ok := e.(string); ok {
			out[s] = true
		}
	}
	return out
}

func setDiff(o, n any) (gone, came []string) {
	ol, _ := o.([]any)
	nl, _ := n.([]any)
	in := func(list []any, e any) bool {
		for _, x := range list {
			if jsonEqual(x, e) {
				return true
			}
		}
		return false
	}
	for _, e := range nl {
		if !in(ol, e) {
			came = append(came, short(e))
		}
	}
	for _, e := range ol {
		if !in(nl, e) {
			gone = append(gone, short(e))
		}
	}
	return gone, came
}

func orNothing(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// sortedKeys is the union of the maps' keys, sorted.
func sortedKeys(a, b map[string]any) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]any{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
