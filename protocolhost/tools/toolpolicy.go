// SPDX-License-Identifier: MIT

package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
)

// ErrToolDenied: the tool is denied by the user's tool rules or the managed policy; it is
// not offered and a call is refused.
var ErrToolDenied = errors.New("tool denied by policy")

// Decide is the tool rules' decision for one tool of a bound plugin (policy.DecideTool with
// the user's rules from plugins.toml and the managed policy): what every listing and call of
// the catalogue follows, whatever the protocol. name is the plugin's own name for the tool
// (or for anything else it offers by name, such as a prompt).
func (c *Catalogue) Decide(b *core.Binding, name string) policy.ToolDecision {
	var m *policy.Managed
	if c.host != nil && c.host.Env != nil && c.host.Env.Config != nil {
		m = c.host.Env.Config.Managed
	}
	d := policy.DecideTool(m, b.Entry.Name, b.Entry.Tools, name)
	// A package installed under another name (--name) stays under the managed rules that
	// name it by its own: both names are decided, and a denial by either stands.
	if pn := plugin.PackagePluginName(b.Entry.Source); d.Allowed && pn != "" && pn != b.Entry.Name {
		if pd := policy.DecideTool(m, pn, nil, name); !pd.Allowed {
			return pd
		}
	}
	return d
}

// allowed leaves out the tools the rules deny, remembering each (a call then names why).
func (c *Catalogue) allowed(b *core.Binding, ts []Tool) []Tool {
	if c.denied == nil {
		c.denied = map[string]deniedTool{}
	}
	out := ts[:0:0]
	for _, t := range ts {
		d := c.Decide(b, t.Tool)
		if d.Allowed {
			delete(c.denied, t.Name)
			out = append(out, t)
			continue
		}
		c.denied[t.Name] = deniedTool{ToolDecision: d, plugin: b.Entry.Name, tool: t.Tool, protocol: t.Protocol}
	}
	return out
}

// deniedTool is a tool the rules left out, and whose it is.
type deniedTool struct {
	policy.ToolDecision
	plugin, tool, protocol string
}

// Denied reports whether the public name is a tool the rules deny (as of the last
// listing): a server of the catalogue that does not offer it still refuses a call to it on
// record (RefuseDenied).
func (c *Catalogue) Denied(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.denied[name]
	return ok
}

// RefuseDenied refuses a call of a denied tool, on record: a tool_call deny with reason
// tool_denied, the rule and who set it. Nil when the tool is not denied.
func (c *Catalogue) RefuseDenied(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refuseDenied(name)
}

func (c *Catalogue) refuseDenied(name string) error {
	d, ok := c.denied[name]
	if !ok {
		return nil
	}
	plugin := d.plugin
	details := map[string]any{"tool": name, "plugin_tool": d.tool, "protocol": d.protocol, "rule": d.Rule, "by": d.By}
	if b := c.bindings[plugin]; b != nil {
		c.recorder(b).Record(audit.EventToolCall, audit.Deny, reason.ToolDenied, details, true)
	}
	who := "your tool rules"
	if d.By == policy.ToolByManaged {
		who = "the managed policy"
	}
	msg := fmt.Sprintf("tool %s: %v: denied by %s (%s)", name, ErrToolDenied, who, d.Rule)
	if d.By == policy.ToolByUser {
		msg += fmt.Sprintf("; see 'fledge plugins tools %s'", plugin)
	}
	return &reason.Failure{Code: reason.ToolDenied, Msg: msg, Of: ErrToolDenied}
}

// ToolState is one tool of a plugin and whether the rules let it be offered.
type ToolState struct {
	Tool
	policy.ToolDecision
}

// ToolStates lists every tool a plugin offers (its definitions checked against their pins,
// as for any listing) with the rules' decision on each: `fledge plugins tools NAME`.
func (c *Catalogue) ToolStates(ctx context.Context, name string) ([]ToolState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.binding(name)
	if err != nil {
		return nil, err
	}
	p := c.provider(b.Manifest.Plugin.Protocol)
	if p == nil {
		return nil, nil
	}
	ts, err := p.Tools(ctx, b)
	if err != nil {
		return nil, err
	}
	ts = c.vetPins(ctx, b, p, ts)
	out := make([]ToolState, len(ts))
	for i, t := range ts {
		out[i] = ToolState{Tool: t, ToolDecision: c.Decide(b, t.Tool)}
	}
	return out, nil
}
