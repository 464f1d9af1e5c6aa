// SPDX-License-Identifier: MIT

package egress

import (
	"fmt"
	"net/url"
	"strings"
)

// A destination may be narrowed to methods and paths: "api.github.com:443 GET,HEAD
// /repos/acme/**". Entries for one destination add up; a request to a destination that has
// rules must match one of them. fledge can only read a request it terminates, so a
// destination with rules is always read (TLS terminated with the session's CA, plain HTTP
// parsed); a plain destination entry for the same host and port lifts its rules.

// Rule is one method-and-path rule of a destination.
type Rule struct {
	Dest    Dest
	Methods []string // upper case; nil: any method
	Path    string   // a pattern: "/" segments, "*" one segment, "**" any number
	entry   string
}

// String is the rule's canonical spelling.
func (r Rule) String() string { return r.entry }

// Bounds of a rule: its pattern's length and its "**" (each may try every split of the
// path), and the segments of a path matched against it.
const (
	MaxRulePattern = 1024
	maxDoubleStars = 4
	maxPathSegs    = 512
)

// ParseEntry parses one network entry: a destination, optionally followed by methods
// ("GET,HEAD" or "*") and a path pattern (starting with "/"). rule is nil for a plain
// destination.
func ParseEntry(s string) (Dest, *Rule, error) {
	fields := strings.Fields(s)
	if len(fields) <= 1 {
		d, err := ParseDest(s)
		return d, nil, err
	}
	bad := func(why string) (Dest, *Rule, error) { return Dest{}, nil, &DestError{Entry: s, Why: why} }
	d, err := ParseDest(fields[0])
	if err != nil {
		return Dest{}, nil, err
	}
	if d.literal {
		return bad("HTTP rules narrow a host name, not an address")
	}
	r := &Rule{Dest: d, Path: "/**"}
	rest := fields[1:]
	if !strings.HasPrefix(rest[0], "/") {
		if rest[0] != "*" {
			for _, m := range strings.Split(rest[0], ",") {
				m = strings.ToUpper(m)
				if !isToken(m) {
					return bad(fmt.Sprintf("method %q is not a token (write GET,HEAD or *)", m))
				}
				r.Methods = append(r.Methods, m)
			}
		}
		rest = rest[1:]
	}
	switch len(rest) {
	case 0:
	case 1:
		if err := checkPattern(rest[0]); err != "" {
			return bad(err)
		}
		r.Path = rest[0]
	default:
		return bad(`an HTTP rule is "host:port METHODS /path/pattern"`)
	}
	m := "*"
	if r.Methods != nil {
		m = strings.Join(r.Methods, ",")
	}
	r.entry = d.String() + " " + m + " " + r.Path
	return d, r, nil
}

func checkPattern(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "a path pattern starts with /"
	}
	if len(p) > MaxRulePattern {
		return fmt.Sprintf("a path pattern longer than %d characters", MaxRulePattern)
	}
	if strings.Count(p, "**") > maxDoubleStars {
		return fmt.Sprintf("more than %d \"**\" in one pattern", maxDoubleStars)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "." || seg == ".." {
			return `"." and ".." are not path segments of a pattern`
		}
		if strings.Contains(seg, "*") && seg != "*" && seg != "**" {
			return `"*" stands alone in a segment ("/a/*/b", "/a/**")`
		}
	}
	return ""
}

// Matches reports whether a request with method and path (escaped, without its query)
// is allowed by r.
func (r Rule) Matches(method, path string) bool {
	if r.Methods != nil {
		ok := false
		for _, m := range r.Methods {
			ok = ok || m == method
		}
		if !ok {
			return false
		}
	}
	segs, ok := pathSegments(path)
	if !ok || len(segs) > maxPathSegs {
		return false
	}
	return matchSegs(strings.Split(r.Path[1:], "/"), segs)
}

// pathSegments decodes a request path into its segments, refusing what a server could read
// as another path than the rule sees: dot segments (with path parameters too, "..;" as
// Tomcat and Spring read it, and encoded more than once, as a server decoding twice reads
// it), an encoded slash or backslash (at any depth of encoding), an empty segment inside
// the path, bad escapes.
func pathSegments(escaped string) ([]string, bool) {
	if !strings.HasPrefix(escaped, "/") {
		return nil, false
	}
	raw := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(raw))
	for i, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil || ambiguousSegment(d) {
			return nil, false
		}
		for again, n := d, 0; strings.Contains(again, "%") && n < maxDecodes; n++ {
			if again, err = url.PathUnescape(again); err != nil {
				break // not an escape a server would decode: literal "%"
			}
			if ambiguousSegment(again) {
				return nil, false
			}
		}
		if d == "" && i != len(raw)-1 {
			return nil, false
		}
		out = append(out, d)
	}
	return out, true
}

// maxDecodes bounds the decodings of a segment pathSegments tries beyond the first.
const maxDecodes = 3

// ambiguousSegment reports whether a decoded path segment may be read by a server as
// something other than one plain segment: a slash, backslash or NUL in it, or a dot segment
// (before any ";" path parameters).
func ambiguousSegment(d string) bool {
	if strings.ContainsAny(d, "/\\\x00") {
		return true
	}
	d, _, _ = strings.Cut(d, ";")
	return d == "." || d == ".."
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		switch p := pat[0]; p {
		case "**":
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(segs) == 0 || segs[0] == "" {
				return false
			}
		default:
			if len(segs) == 0 || segs[0] != p {
				return false
			}
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}
