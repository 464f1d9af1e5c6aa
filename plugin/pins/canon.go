// SPDX-License-Identifier: MIT

package pins

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"unicode"
)

// Canonical definitions: what a pin hashes.
//
// Servers re-emit the same tool in another notation from one release to the next (a new
// schema generator, a linter over the descriptions): keys in another order, a different
// $schema draft URL, additionalProperties spelled out or left to its default, `required`
// in another order, a description re-wrapped or given a full stop. None of that changes
// what the model is told or what it may send, and quarantining it teaches users to approve
// without reading. What is hashed is therefore the definition in a canonical form that
// keeps every word and every constraint and drops only notation:
//
//   - descriptions and titles (the tool's and every one in its schema) as their words
//     (Words): split at white space, quotes, backticks and brackets trimmed from each
//     word's ends, a word of letters only in one case. A word added, removed or changed is
//     a change; so is punctuation inside a word ("~/.ssh/id_rsa", "don't"), a leading
//     - . * _ ("-1", ".env"), the case of a path or identifier, and a clause mark moved
//     (where a sentence ends is meaning). Invisible characters are not white space or
//     punctuation and stay (a description cannot hide words in them unnoticed);
//   - in the schema: "$schema" dropped unless a keyword's meaning depends on the draft
//     (then kept as the draft it selects); "additionalProperties" dropped when it is a
//     boolean (validators differ on its default, generators on whether they spell it out;
//     what the model is told it may send is the properties); "required" and "enum"
//     sorted and without repeats (sets); a one-element "type" list as its element; empty
//     "properties" and "required" dropped; keys sorted (encoding/json sorts map keys).
//
// Everything else (a new or removed property, a new required one, a type, an enum value,
// a default, a format, a pattern, a bound) is kept, and so changes the hash.

// canonPrefix marks a canonical pin. Pins made before canonical hashing have the plain
// "sha256:" prefix (legacyHash); Check accepts those for the same definition and rewrites
// them, so an upgrade of fledge quarantines nothing.
const canonPrefix = "sha256c:"

// Hash is the definition's pin: sha256 over its canonical form.
func Hash(d Def) string {
	sum := sha256.Sum256(Canonical(d))
	return canonPrefix + hex.EncodeToString(sum[:])
}

// Canonical is the definition as hashed: JSON of its name, its description's words and
// its canonical input schema (a schema that is not JSON is kept as its bytes).
func Canonical(d Def) []byte {
	var schema any
	if len(d.InputSchema) > 0 {
		if json.Unmarshal(d.InputSchema, &schema) != nil {
			schema = map[string]any{"(not json)": string(d.InputSchema)}
		} else {
			schema = canonSchema(schema)
		}
	}
	b, _ := json.Marshal(map[string]any{"name": d.Name, "description": Words(d.Description), "input_schema": schema})
	return b
}

// legacyHash is the pin of fledge before canonical hashing: the raw description and the
// schema with its keys sorted. Only read, to recognise pins made then.
func legacyHash(d Def) string {
	var schema any
	if len(d.InputSchema) > 0 && json.Unmarshal(d.InputSchema, &schema) != nil {
		schema = string(d.InputSchema)
	}
	b, _ := json.Marshal(map[string]any{"name": d.Name, "description": d.Description, "input_schema": schema})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// isLegacy reports whether a stored hash is of the kind legacyHash makes.
func isLegacy(hash string) bool { return strings.HasPrefix(hash, "sha256:") }

// typographic are the characters editors put in for ASCII punctuation: compared as that.
var typographic = strings.NewReplacer("‘", "'", "’", "'", "“", `"`, "”", `"`, "«", `"`, "»", `"`,
	"–", "-", "—", "-", "…", "...")

// wrapper reports whether r is a quote, backtick or bracket: trimmed from a word's ends
// (`path`, "file", (optional) are the word). Nothing else is: a leading - . * _ # ~ / $ is
// part of what the word names (-1, -rf, .env, *.tmp, _private, ~/.ssh).
func wrapper(r rune) bool {
	switch r {
	case '\'', '"', '`', '(', ')', '[', ']', '{', '}':
		return true
	}
	return false
}

// clause reports whether r ends a clause or a sentence. Where a clause ends is meaning
// ("Never share your keys" is not "Never. Share your keys"), so it is kept, as a word of
// its own after the word it follows; only at the very end of a text is it notation.
func clause(r rune) bool {
	switch r {
	case '.', ',', ';', ':', '!', '?':
		return true
	}
	return false
}

// Words is a text as compared: its words with quotes, backticks and brackets trimmed from
// their ends, the punctuation that ends a clause as a word of its own (none at the end of
// the text, but for a "?"), a word of letters only in one case (NOT, Not and not are one word; readFile,
// ID_RSA and ~/.ssh/Key keep theirs), joined by single spaces.
func Words(s string) string {
	s = typographic.Replace(s)
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '\u00a0' }) {
		var tail []string
		for {
			f = strings.TrimFunc(f, wrapper)
			j := len(f)
			for j > 0 && clause(rune(f[j-1])) { // clause runes are ASCII
				j--
			}
			if j == len(f) {
				break
			}
			tail = append([]string{f[j:]}, tail...)
			f = f[:j]
		}
		if f != "" {
			out = append(out, foldCase(f))
		}
		out = append(out, tail...)
	}
	// A question stays one: "?" is kept even there.
	for len(out) > 0 && strings.IndexFunc(out[len(out)-1], func(r rune) bool { return !clause(r) || r == '?' }) < 0 {
		out = out[:len(out)-1]
	}
	return strings.Join(out, " ")
}

// foldCase is w lower-cased when its case is emphasis or a sentence's start (all lower, all
// upper, capitalised) and it is letters only (an apostrophe inside: DON'T); otherwise w as
// given, since case in a path, an identifier or a name of mixed case is part of it.
func foldCase(w string) string {
	upper, lower, first := 0, 0, true
	for i, r := range w {
		switch {
		case unicode.IsUpper(r):
			if !first {
				upper++
			}
		case unicode.IsLower(r):
			lower++
		case r == '\'' && i > 0 && i < len(w)-1:
		default:
			return w
		}
		first = false
	}
	if upper > 0 && lower > 0 {
		return w
	}
	return strings.ToLower(w)
}

// canonSchema returns v (a decoded JSON Schema, or any part of it) in canonical form.
func canonSchema(v any) any { return canonNode(v, draftSensitive(v)) }

// draftKeywords mean different things under draft-07 and 2020-12 (draft-07 ignores every
// keyword beside "$ref"; "items" as a list, "dependencies", "$id" fragments).
var draftKeywords = map[string]bool{"$ref": true, "additionalItems": true, "prefixItems": true,
	"dependencies": true, "$id": true, "$anchor": true, "$dynamicRef": true, "$recursiveRef": true,
	"unevaluatedProperties": true, "unevaluatedItems": true}

// draftSensitive reports whether v uses a keyword whose meaning depends on the draft (or
// "items" as a list): then "$schema" is meaning, not notation.
func draftSensitive(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if _, list := val.([]any); draftKeywords[k] || k == "items" && list {
				return true
			}
			if draftSensitive(val) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if draftSensitive(e) {
				return true
			}
		}
	}
	return false
}

// draftOf is a "$schema" as the draft a validator takes it for: the two draft-07 URLs are
// one, the 2020-12 URL is the default (""); anything else as given.
func draftOf(v any) any {
	switch v {
	case "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#":
		return "draft-07"
	case "https://json-schema.org/draft/2020-12/schema":
		return ""
	}
	return v
}

func canonNode(v any, sensitive bool) any {
	canonSchema := func(v any) any { return canonNode(v, sensitive) }
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			switch k {
			case "$schema":
				if d := draftOf(val); sensitive && d != "" {
					out[k] = d
				}
				continue
			case "additionalProperties":
				if _, isBool := val.(bool); isBool {
					continue
				}
			case "description", "title":
				if s, ok := val.(string); ok {
					out[k] = Words(s)
					continue
				}
			case "required", "enum":
				if list, ok := val.([]any); ok {
					val = sortedSet(list)
					if k == "required" && len(list) == 0 {
						continue
					}
					out[k] = val
					continue
				}
			case "type":
				if list, ok := val.([]any); ok && len(list) == 1 {
					val = list[0]
				} else if ok {
					val = sortedSet(list)
				}
				out[k] = val
				continue
			case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
				// Maps of names to schemas: each value is a schema, the names are data.
				if m, ok := val.(map[string]any); ok {
					if len(m) == 0 && k == "properties" {
						continue
					}
					sub := make(map[string]any, len(m))
					for name, s := range m {
						sub[name] = canonSchema(s)
					}
					out[k] = sub
					continue
				}
			case "default", "const", "examples":
				out[k] = val // data, not schema: kept as given
				continue
			}
			out[k] = canonSchema(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonSchema(e)
		}
		return out
	}
	return v
}

// sortedSet is list sorted by each element's JSON, without repeats.
func sortedSet(list []any) []any {
	type kv struct {
		key string
		val any
	}
	items := make([]kv, 0, len(list))
	seen := map[string]bool{}
	for _, e := range list {
		b, _ := json.Marshal(e)
		if seen[string(b)] {
			continue
		}
		seen[string(b)] = true
		items = append(items, kv{string(b), e})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].key < items[j].key })
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it.val
	}
	return out
}

// sameLegacy reports whether p, a pin made before canonical hashing, is of the definition
// d (whose canonical pin is now): its legacy hash is d's, or, when d changed only in
// notation since, what was kept of it for review has d's canonical hash. The kept text is
// the one a terminal showed (control sequences removed, clipped): a kept description that
// was clipped, or a schema too large to keep, never matches, and is quarantined as before.
func sameLegacy(p Pin, d Def, now Pin) bool {
	if !isLegacy(p.Hash) {
		return false
	}
	if p.Hash == legacyHash(d) {
		return true
	}
	if (len(p.InputSchema) == 0) != (len(d.InputSchema) == 0) {
		return false
	}
	// What was kept speaks for the approved definition only when it is all of it: its
	// legacy hash is the pin's. A description clipped for review (its tail could be cut
	// from the new one unseen) or with control sequences removed is not.
	if legacyHash(Def{Name: d.Name, Description: p.Description, InputSchema: p.InputSchema}) != p.Hash {
		return false
	}
	return Hash(Def{Name: d.Name, Description: p.Description, InputSchema: p.InputSchema}) == now.Hash
}
