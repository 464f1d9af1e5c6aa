// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// ToolRuleChange is what `fledge plugins tools NAME` changes: globs to allow, to deny, or
// every rule removed first (Reset).
type ToolRuleChange struct {
	Allow, Deny []string
	Reset       bool
}

// Empty reports whether nothing is to change.
func (c ToolRuleChange) Empty() bool { return !c.Reset && len(c.Allow) == 0 && len(c.Deny) == 0 }

// ChangeToolRules changes an installed plugin's tool rules in plugins.toml and records the
// change (tool_rules) or the refusal. It returns the rules now in force (nil: none).
func (h *Host) ChangeToolRules(name string, ch ToolRuleChange) (*policy.ToolRules, error) {
	e := h.Env
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	var before *policy.ToolRules
	entry, err := plugin.SetToolRules(e.ConfigDir, name, func(cur *policy.ToolRules) (*policy.ToolRules, error) {
		before = cur
		next := cur
		if ch.Reset {
			next = nil
		}
		for _, g := range ch.Allow {
			r, err := next.With(g, false)
			if err != nil {
				return nil, err
			}
			next = &r
		}
		for _, g := range ch.Deny {
			r, err := next.With(g, true)
			if err != nil {
				return nil, err
			}
			next = &r
		}
		return next, nil
	})
	details := map[string]any{"allow_added": ch.Allow, "deny_added": ch.Deny, "reset": ch.Reset}
	if err != nil {
		if errors.Is(err, plugin.ErrNotInstalled) {
			return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
		}
		details["error"] = err.Error()
		_ = e.NewRecorder(log, refusedRefByName(e.ConfigDir, name), nil).RecordNow(audit.EventToolRules, audit.Deny, reason.BadArguments, details)
		code := ExitFailure
		if errors.Is(err, policy.ErrBadToolRule) {
			code = ExitUsage
		}
		return nil, exitErr(code, "plugins tools %s: %v", name, err)
	}
	details["previous"] = rulesJSON(before)
	details["rules"] = rulesJSON(entry.Tools)
	if err := e.NewRecorder(log, entryRef(entry), nil).RecordNow(audit.EventToolRules, audit.Allow, reason.OK, details); err != nil {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the audit log could not record this change of tool rules: %v", err))
	}
	return entry.Tools, nil
}

func rulesJSON(r *policy.ToolRules) map[string]any {
	out := map[string]any{"allow": []string{}, "deny": []string{}}
	if r != nil {
		if r.Allow != nil {
			out["allow"] = r.Allow
		}
		if r.Deny != nil {
			out["deny"] = r.Deny
		}
	}
	return out
}

// PluginToolStates lists a plugin's tools with the tool rules' decision on each (the plugin
// is started to list them, as `tools list` does).
func (t *ToolSet) PluginToolStates(ctx context.Context, name string) ([]tools.ToolState, error) {
	if t.reg.Find(name) == nil {
		return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
	}
	st, err := t.Catalogue.ToolStates(ctx, name)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%s: its tools cannot be listed: %v", name, err)
	}
	return st, nil
}
