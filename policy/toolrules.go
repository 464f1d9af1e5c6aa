// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ToolRules are a user's allow/deny globs over one plugin's tools (plugins.toml, `fledge
// plugins tools NAME --allow/--deny`). Names are the plugin's own tool names ("read_file"),
// never the public plugin_<plugin>_<tool> ones.
type ToolRules struct {
	Allow []string `toml:"allow,omitempty" json:"allow,omitempty"`
	Deny  []string `toml:"deny,omitempty" json:"deny,omitempty"`
}

// Empty reports whether no rule is set.
func (r *ToolRules) Empty() bool { return r == nil || len(r.Allow) == 0 && len(r.Deny) == 0 }

// ErrBadToolRule: a tool glob that is empty, too long or has spaces or control characters.
var ErrBadToolRule = errors.New("invalid tool rule")

// ValidToolGlob checks one --allow/--deny glob.
func ValidToolGlob(g string) error {
	if msg := validGlob(g); msg != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadToolRule, g, msg)
	}
	if strings.Contains(g, ":") {
		return fmt.Errorf("%w: %q: name the plugin's tool only (plugins tools NAME --deny 'write_*')", ErrBadToolRule, g)
	}
	return nil
}

// maxToolRules bounds one plugin's rules.
const maxToolRules = 256

// With is r with pattern added to the allow (or deny) list, once; the other list loses it.
func (r *ToolRules) With(pattern string, deny bool) (ToolRules, error) {
	if err := ValidToolGlob(pattern); err != nil {
		return ToolRules{}, err
	}
	var out ToolRules
	if r != nil {
		out = ToolRules{Allow: slices.Clone(r.Allow), Deny: slices.Clone(r.Deny)}
	}
	add, drop := &out.Allow, &out.Deny
	if deny {
		add, drop = &out.Deny, &out.Allow
	}
	*drop = slices.DeleteFunc(*drop, func(s string) bool { return s == pattern })
	if !slices.Contains(*add, pattern) {
		*add = append(*add, pattern)
	}
	if len(*drop) == 0 {
		*drop = nil
	}
	if len(out.Allow)+len(out.Deny) > maxToolRules {
		return ToolRules{}, fmt.Errorf("%w: more than %d rules", ErrBadToolRule, maxToolRules)
	}
	return out, nil
}

// Who set the rule a tool decision follows.
const (
	ToolByManaged = "managed"
	ToolByUser    = "user"
)

// ToolDecision is whether one tool of one plugin may be offered and called, and the rule
// that decided it ("" when no rule applies).
type ToolDecision struct {
	Allowed bool   `json:"allowed"`
	By      string `json:"by,omitempty"`   // managed | user
	Rule    string `json:"rule,omitempty"` // "deny write_*", "/etc/fledge/managed.toml: [tools] deny = \"*:delete_*\""
}

// DecideTool is the one decision of whether a plugin's tool (or any name a plugin offers
// by: a prompt's, later) may be listed and called, for every protocol. The managed policy
// comes first, then the user's rules; a deny wins over an allow at each level, and an allow
// list, when one applies, admits only the names it matches:
//
//  1. a managed deny matching plugin:tool: denied;
//  2. a user deny matching tool: denied;
//  3. managed allow rules whose plugin part matches, none matching the tool: denied;
//  4. user allow rules, none matching the tool: denied;
//  5. otherwise allowed.
func DecideTool(m *Managed, plugin string, user *ToolRules, tool string) ToolDecision {
	if m != nil {
		for _, r := range m.ToolsDeny {
			pl, t, _ := strings.Cut(r, ":")
			if Glob(pl, plugin) && Glob(t, tool) {
				return ToolDecision{By: ToolByManaged, Rule: m.Rule("tools.deny:"+r, fmt.Sprintf("%q", r))}
			}
		}
	}
	if user != nil {
		for _, g := range user.Deny {
			if Glob(g, tool) {
				return ToolDecision{By: ToolByUser, Rule: "deny " + g}
			}
		}
	}
	if m != nil {
		applies, file := false, ""
		for _, r := range m.ToolsAllow {
			pl, t, _ := strings.Cut(r, ":")
			if !Glob(pl, plugin) {
				continue
			}
			if Glob(t, tool) {
				applies = false
				file = ""
				break
			}
			if !applies {
				applies, file = true, r
			}
		}
		if applies {
			return ToolDecision{By: ToolByManaged, Rule: m.Rule("tools.allow:"+file, "[...] (no entry for "+plugin+":"+tool+")")}
		}
	}
	if user != nil && len(user.Allow) > 0 {
		if !slices.ContainsFunc(user.Allow, func(g string) bool { return Glob(g, tool) }) {
			return ToolDecision{By: ToolByUser, Rule: "allow " + strings.Join(user.Allow, ", ") + " (not matched)"}
		}
	}
	return ToolDecision{Allowed: true}
}
