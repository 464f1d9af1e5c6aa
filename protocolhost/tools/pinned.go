// SPDX-License-Identifier: MIT

package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// MaxDescription bounds a tool's description as fledge shows it (tools list, MCP clients).
const MaxDescription = 2048

// ErrToolChanged: the tool's definition differs from the one the user approved; it is
// quarantined until `fledge plugins approve`.
var ErrToolChanged = errors.New("tool definition changed since it was approved")

// ErrAmbiguous: two plugins offer tools under the same public name; neither is offered.
var ErrAmbiguous = errors.New("two plugins offer a tool of this name")

// InstructionsProvider is a Provider whose plugins give instructions besides their tools
// (an MCP server's initialize result): they are pinned with the tools.
type InstructionsProvider interface {
	Instructions(ctx context.Context, b *core.Binding) string
}

// DefinitionsProvider is a Provider whose plugins describe more than their tools (an MCP
// server's prompts and resource templates): those definitions are pinned with the tools,
// under names no tool name can take (they hold a ':'), and held back the same way (Held).
type DefinitionsProvider interface {
	Definitions(ctx context.Context, b *core.Binding) []pins.Def
}

// Held reports whether a plugin's definition of that pin name (a DefinitionsProvider's)
// is quarantined: changed or new since it was approved, as of the last listing.
func (c *Catalogue) Held(plugin, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[plugin+"\x00"+name]
}

// pinned are the protocols whose plugins describe their own tools at run time, so a
// definition can change after the user approved the plugin.
var pinned = map[string]bool{plugin.ProtocolMCP: true, plugin.ProtocolMCPRemote: true, plugin.ProtocolJSONRPC: true}

// vet is every listing's one gate: descriptions bounded and stripped of terminal control
// sequences, (for self-describing protocols) each definition checked against its pin, and
// the tool rules (Decide). Changed, new and denied tools are left out and remembered, so a
// call names why it is refused.
func (c *Catalogue) vet(ctx context.Context, b *core.Binding, p Provider, ts []Tool) []Tool {
	return c.allowed(b, c.vetPins(ctx, b, p, ts))
}

// vetPins is vet without the tool rules.
func (c *Catalogue) vetPins(ctx context.Context, b *core.Binding, p Provider, ts []Tool) []Tool {
	if !pinned[b.Manifest.Plugin.Protocol] {
		for i := range ts {
			ts[i].Description = cleanText(ts[i].Description)
		}
		return ts
	}
	instr := ""
	if ip, ok := p.(InstructionsProvider); ok {
		instr = ip.Instructions(ctx, b)
	}
	defs := make([]pins.Def, len(ts))
	for i, t := range ts {
		defs[i] = pins.Def{Name: t.Tool, Description: t.Description, InputSchema: Schema(&t)}
	}
	var more []pins.Def
	if dp, ok := p.(DefinitionsProvider); ok {
		more = dp.Definitions(ctx, b)
		for i := range more {
			more[i].Description = cleanText(more[i].Description)
		}
		defs = append(defs, more...)
	}
	v, err := pins.Check(c.host.Env.ConfigDir, b.Entry.Name, instr, defs)
	if err != nil {
		c.warnOnce(b.Entry.Name+"/pins", fmt.Sprintf("plugin %s: its approved tool definitions cannot be read (%v); its tools are not offered until 'fledge plugins approve %s'", b.Entry.Name, err, b.Entry.Name))
	}
	if c.quarantined == nil {
		c.quarantined = map[string]pins.Change{}
	}
	var rec *core.Recorder
	out := ts[:0:0]
	for _, t := range ts {
		t.Description = cleanText(t.Description)
		if v.Allowed(t.Tool) {
			delete(c.quarantined, t.Name) // approved since, or back to what was approved
			out = append(out, t)
			continue
		}
		ch := v.Quarantined[t.Tool]
		c.quarantined[t.Name] = ch
		if ch.Fresh {
			if rec == nil {
				rec = c.recorder(b)
			}
			// On record once per difference, not at every listing.
			rec.Record(audit.EventToolChanged, audit.Deny, reason.ToolChanged, changeDetails(t, ch), true)
		}
		what := "changed since it was approved"
		if ch.Old == "" {
			what = "is new since the plugin was approved"
		}
		if ch.Tool != t.Tool {
			what = "is held back: the server's instructions changed since they were approved"
		}
		c.warnOnce(t.Name, fmt.Sprintf("plugin %s: tool %s %s; it is not offered until you approve it ('fledge plugins review %s', then 'fledge plugins approve %s')",
			b.Entry.Name, t.Tool, what, b.Entry.Name, b.Entry.Name))
	}
	if c.held == nil {
		c.held = map[string]bool{}
	}
	for _, d := range more {
		key := b.Entry.Name + "\x00" + d.Name
		ch, q := v.Quarantined[d.Name]
		if !q {
			delete(c.held, key)
			continue
		}
		c.held[key] = true
		if ch.Fresh {
			if rec == nil {
				rec = c.recorder(b)
			}
			dd := map[string]any{"definition": d.Name, "protocol": b.Manifest.Plugin.Protocol, "new_hash": ch.New}
			if ch.Old != "" {
				dd["old_hash"] = ch.Old
			}
			rec.Record(audit.EventToolChanged, audit.Deny, reason.ToolChanged, dd, true)
		}
		c.warnOnce(b.Entry.Name+"\x00"+d.Name, fmt.Sprintf("plugin %s: %s changed or is new since it was approved; it is not offered until you approve it ('fledge plugins review %s', then 'fledge plugins approve %s')",
			b.Entry.Name, d.Name, b.Entry.Name, b.Entry.Name))
	}
	if ch, ok := v.Quarantined[pins.InstructionsKey]; ok && ch.Fresh {
		if rec == nil {
			rec = c.recorder(b)
		}
		d := map[string]any{"changed": pins.InstructionsKey, "protocol": b.Manifest.Plugin.Protocol, "new_hash": ch.New}
		if ch.Old != "" {
			d["old_hash"] = ch.Old
		}
		rec.Record(audit.EventToolChanged, audit.Deny, reason.ToolChanged, d, true)
	}
	return out
}

func changeDetails(t Tool, ch pins.Change) map[string]any {
	d := map[string]any{"tool": t.Name, "plugin_tool": t.Tool, "protocol": t.Protocol, "new_hash": ch.New}
	if ch.Old != "" {
		d["old_hash"] = ch.Old
	}
	if ch.Tool != t.Tool {
		d["changed"] = ch.Tool // the server's instructions
	}
	return d
}

// quarantine refuses a call of a quarantined tool, on record.
func (c *Catalogue) quarantine(b *core.Binding, name string) error {
	ch, ok := c.quarantined[name]
	if !ok {
		return nil
	}
	d := map[string]any{"tool": name, "new_hash": ch.New}
	if ch.Old != "" {
		d["old_hash"] = ch.Old
	}
	c.recorder(b).Record(audit.EventToolCall, audit.Deny, reason.ToolChanged, d, true)
	msg := fmt.Sprintf("tool %s: %v (pinned %s, now %s); see 'fledge plugins review %s'", name, ErrToolChanged, orNone(ch.Old), ch.New, b.Entry.Name)
	return &reason.Failure{Code: reason.ToolChanged, Msg: msg, Of: ErrToolChanged}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (c *Catalogue) recorder(b *core.Binding) *core.Recorder {
	log, err := c.host.Env.Audit()
	if err != nil {
		return core.NewRecorder(nil, "", nil, c.host.Env.Sandbox.Report(), nil)
	}
	return c.host.Env.NewRecorder(log, b.Ref, nil)
}

func (c *Catalogue) warnOnce(key, msg string) {
	if c.warned == nil {
		c.warned = map[string]bool{}
	}
	if c.warned[key] {
		return
	}
	c.warned[key] = true
	w := c.host.Stderr
	if w == nil {
		w = io.Discard
	}
	_ = ui.HostLine(w, "fledge: warning: "+msg)
}

// cleanText is a plugin's description as fledge passes it on: no terminal control
// sequences, bounded.
func cleanText(s string) string {
	return ui.Clip(ui.PlainText(s), MaxDescription)
}

// HasPluginFor reports whether name (plugin_<plugin>_<tool>) names an installed plugin.
func (c *Catalogue) HasPluginFor(name string) bool {
	rest, ok := strings.CutPrefix(name, "plugin_")
	if !ok {
		return false
	}
	for i := len(rest) - 1; i > 0; i-- {
		if rest[i] == '_' && c.reg.Find(rest[:i]) != nil {
			return true
		}
	}
	return false
}

// PluginTools lists one installed plugin's tools through the same gate as List (pins,
// sanitised descriptions): what install shows, and pins, right after installing.
func (c *Catalogue) PluginTools(ctx context.Context, name string) ([]Tool, error) {
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
	return c.vet(ctx, b, p, ts), nil
}

// PinsStamp changes whenever a plugin's pins are saved or removed: a server of the
// catalogue that sees it change lists its tools again, so a tool approved by `fledge
// plugins approve` in another process comes back. Every save renames a new file into
// place, so each pin file's inode says what its times might not (two saves within one
// tick of the kernel's clock).
func (c *Catalogue) PinsStamp() string {
	d, err := os.Open(filepath.Join(c.host.Env.ConfigDir, pins.Dir))
	if err != nil {
		return ""
	}
	defer d.Close()
	// One entry per installed plugin that describes its tools (and a save's temporary
	// file); bounded all the same.
	entries, _ := d.ReadDir(maxPinFiles)
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		if ino, ok := inodeOf(fi); ok {
			fmt.Fprintf(&b, ":%d", ino)
		}
		b.WriteByte('/')
	}
	return b.String()
}

// maxPinFiles bounds what PinsStamp looks at.
const maxPinFiles = 4096
