// SPDX-License-Identifier: MIT

package darwin

import (
	"fmt"
	"strings"
)

// A small SBPL reader and evaluator, test-only: it checks that generated profiles are
// well-formed (balanced, every string literal decodes back to the path that went in) and lets
// tests ask "may this path be read?" under Seatbelt's rule: the last matching rule wins,
// `(deny default)` when none does.

type node struct {
	atom   string // symbol, or decoded string when isStr
	isStr  bool
	list   []*node
	isList bool
}

func (n *node) String() string {
	if !n.isList {
		if n.isStr {
			return fmt.Sprintf("%q", n.atom)
		}
		return n.atom
	}
	parts := make([]string, len(n.list))
	for i, c := range n.list {
		parts[i] = c.String()
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// parseSBPL reads every top-level form. It fails on unbalanced parentheses, unterminated or
// badly escaped strings and raw control characters inside strings.
func parseSBPL(src string) ([]*node, error) {
	p := &sbplParser{src: src}
	var out []*node
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			return out, nil
		}
		n, err := p.form()
		if err != nil {
			return nil, err
		}
		if !n.isList {
			return nil, fmt.Errorf("top-level atom %q at %d", n.atom, p.pos)
		}
		out = append(out, n)
	}
}

type sbplParser struct {
	src string
	pos int
}

func (p *sbplParser) skipSpace() {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == ';':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == ' ' || c == '\n' || c == '\t':
			p.pos++
		default:
			return
		}
	}
}

func (p *sbplParser) form() (*node, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return nil, fmt.Errorf("unexpected end of input")
	}
	switch c := p.src[p.pos]; c {
	case '(':
		p.pos++
		n := &node{isList: true}
		for {
			p.skipSpace()
			if p.pos >= len(p.src) {
				return nil, fmt.Errorf("unbalanced '('")
			}
			if p.src[p.pos] == ')' {
				p.pos++
				return n, nil
			}
			child, err := p.form()
			if err != nil {
				return nil, err
			}
			n.list = append(n.list, child)
		}
	case ')':
		return nil, fmt.Errorf("unexpected ')' at %d", p.pos)
	case '"':
		p.pos++
		var b strings.Builder
		for {
			if p.pos >= len(p.src) {
				return nil, fmt.Errorf("unterminated string")
			}
			c := p.src[p.pos]
			p.pos++
			switch {
			case c == '"':
				return &node{atom: b.String(), isStr: true}, nil
			case c == '\\':
				if p.pos >= len(p.src) {
					return nil, fmt.Errorf("dangling backslash")
				}
				e := p.src[p.pos]
				p.pos++
				if e != '\\' && e != '"' {
					return nil, fmt.Errorf("escape \\%c not produced by Quote", e)
				}
				b.WriteByte(e)
			case c < 0x20 || c == 0x7f:
				return nil, fmt.Errorf("raw control byte %#x in string", c)
			default:
				b.WriteByte(c)
			}
		}
	default:
		start := p.pos
		for p.pos < len(p.src) {
			c := p.src[p.pos]
			if c == '(' || c == ')' || c == ' ' || c == '\n' || c == '\t' || c == '"' || c == ';' {
				break
			}
			p.pos++
		}
		return &node{atom: p.src[start:p.pos]}, nil
	}
}

// rule is one (allow|deny op... filter...) form.
type rule struct {
	index   int
	action  string // allow | deny
	ops     []string
	filters []*node
}

func rulesOf(forms []*node) []rule {
	var out []rule
	for i, f := range forms {
		if len(f.list) == 0 || f.list[0].isList {
			continue
		}
		act := f.list[0].atom
		if act != "allow" && act != "deny" {
			continue
		}
		r := rule{index: i, action: act}
		for _, c := range f.list[1:] {
			if c.isList {
				r.filters = append(r.filters, c)
			} else {
				r.ops = append(r.ops, c.atom)
			}
		}
		out = append(out, r)
	}
	return out
}

// opMatches: "file-read*" covers every file-read-… operation, "default" every operation.
func opMatches(ruleOp, op string) bool {
	if ruleOp == "default" || ruleOp == op {
		return true
	}
	if strings.HasSuffix(ruleOp, "*") {
		return strings.HasPrefix(op, strings.TrimSuffix(ruleOp, "*"))
	}
	return false
}

// filterMatches evaluates the filters the generator emits against a query target: a path
// for file and exec operations, "remote-ip"/"local-ip"/"unix:<path>" for network ones.
func filterMatches(f *node, target string) bool {
	if len(f.list) < 2 {
		return false
	}
	kind := f.list[0].atom
	arg := f.list[1]
	switch kind {
	case "literal":
		return arg.isStr && (target == arg.atom || target == "unix:"+arg.atom)
	case "subpath":
		return arg.isStr && (target == arg.atom || strings.HasPrefix(target, arg.atom+"/"))
	case "remote":
		return target == "remote-ip" && arg.atom == "ip"
	case "local":
		return target == "local-ip" && arg.atom == "ip"
	}
	return false // target, global-name, sysctl-name...: never a path
}

// decide returns the action of the last rule matching (op, target), "deny" by default, and
// the index of the deciding form (-1 for the default).
func decide(rules []rule, op, target string) (string, int) {
	action, at := "deny", -1
	for _, r := range rules {
		matchOp := false
		for _, o := range r.ops {
			if opMatches(o, op) {
				matchOp = true
				break
			}
		}
		if !matchOp {
			continue
		}
		if len(r.filters) == 0 {
			action, at = r.action, r.index
			continue
		}
		for _, f := range r.filters {
			if filterMatches(f, target) {
				action, at = r.action, r.index
				break
			}
		}
	}
	return action, at
}

// pathsOf returns the decoded string argument of every literal/subpath filter of r.
func pathsOf(r rule) []string {
	var out []string
	for _, f := range r.filters {
		if len(f.list) == 2 && !f.list[0].isList && (f.list[0].atom == "literal" || f.list[0].atom == "subpath") && f.list[1].isStr {
			out = append(out, f.list[1].atom)
		}
	}
	return out
}
