// SPDX-License-Identifier: MIT

// Package jsonrpc is the jsonrpc-2.0 adapter (JSON-RPC 2.0 tool/hook plugins): plugins are executables that
// speak JSON-RPC 2.0 over stdio, describe themselves in an `initialize` handshake (name,
// version, description, hooks, tools, priority), run tools with `tool/execute`, hooks with
// `hook/<name>` in priority order, and end with `shutdown`. Every plugin runs long-lived
// within one fledge invocation, in its own sandbox with its grants, through the session core
// (core.Spawn, core.Recorder, policy.Profile); every tool and hook call is audited before it
// is sent and after it answered.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/ui/clip"
)

// The protocol spec's limits and defaults, plus fledge's own bounds on what a plugin may describe.
const (
	DefaultVersion  = "0.0.0"
	DefaultPriority = 500
	// MaxPlugins is the JSON-RPC 2.0 host's limit: at most 16 plugins.
	MaxPlugins = 16
	MaxTools   = 256
	MaxParams  = 64
	MaxHooks   = 64
	maxText    = 4096
	maxName    = 64
	// maxPriority bounds priority so ordering arithmetic never overflows.
	maxPriority = 1_000_000_000
)

var (
	// ErrManifest: the initialize result is not a valid JSON-RPC 2.0 tool/hook plugin manifest.
	ErrManifest = errors.New("invalid plugin manifest")
	// ErrManifestChanged: the live handshake differs from the one recorded at install.
	ErrManifestChanged = errors.New("plugin's handshake changed since install")
)

// Tool is one tool a plugin declares.
type Tool struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Parameters  []tools.Param `json:"parameters"`
}

// Manifest is a validated initialize result, with the spec's defaults filled in. It is what
// install records (plugin.HandshakeFile) and what every later handshake must match.
type Manifest struct {
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	Description string   `json:"description"`
	Hooks       []string `json:"hooks"`
	Tools       []Tool   `json:"tools"`
	Priority    int      `json:"priority"`
}

// Subscribes reports whether the plugin subscribed to hook.
func (m *Manifest) Subscribes(hook string) bool {
	for _, h := range m.Hooks {
		if h == hook {
			return true
		}
	}
	return false
}

// Tool returns the declared tool of that (plugin-local) name, or nil.
func (m *Manifest) Tool(name string) *Tool {
	for i := range m.Tools {
		if m.Tools[i].Name == name {
			return &m.Tools[i]
		}
	}
	return nil
}

// Encode is the canonical JSON form (recorded at install, compared at every start).
func (m *Manifest) Encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

// Same reports whether two manifests describe the same plugin interface.
func (m *Manifest) Same(o *Manifest) bool { return bytes.Equal(m.Encode(), o.Encode()) }

// DecodeRecorded reads a manifest recorded by install.
func DecodeRecorded(data []byte) (*Manifest, error) {
	return ParseManifest(data)
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
// toolNameRe: tool names become part of plugin_<plugin>_<tool> and of CLI arguments.
var toolNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`) })

type rawParam struct {
	Name        *string          `json:"name"`
	Type        *string          `json:"type"`
	Description *string          `json:"description"`
	Required    *json.RawMessage `json:"required"`
}

type rawTool struct {
	Name        *string    `json:"name"`
	Description *string    `json:"description"`
	Parameters  []rawParam `json:"parameters"`
}

type rawManifest struct {
	Name        *string      `json:"name"`
	Version     *string      `json:"version"`
	Description *string      `json:"description"`
	Hooks       []string     `json:"hooks"`
	Tools       []rawTool    `json:"tools"`
	Priority    *json.Number `json:"priority"`
}

// ParseManifest validates an initialize result exactly as the spec says (name required and
// without '_'; version "0.0.0", description "", hooks [], tools [], priority 500 when
// absent), plus fledge's bounds: the name must also be a valid fledge plugin name (it names
// a directory), texts are bounded and free of control characters, tool names are
// [A-Za-z0-9][A-Za-z0-9_.-]*, and there are at most MaxTools tools, MaxParams parameters and
// MaxHooks hooks.
func ParseManifest(raw []byte) (*Manifest, error) {
	var r rawManifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return nil, badManifest("result is not a manifest object: %s", clip.Bytes(err.Error(), 80))
	}
	m := &Manifest{Version: DefaultVersion, Hooks: []string{}, Tools: []Tool{}, Priority: DefaultPriority}
	if err := parseHeader(&r, m); err != nil {
		return nil, err
	}
	if err := parseHooks(r.Hooks, m); err != nil {
		return nil, err
	}
	if err := parseTools(r.Tools, m); err != nil {
		return nil, err
	}
	return m, nil
}

// badManifest wraps ErrManifest so every rejection matches errors.Is(err, ErrManifest).
func badManifest(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrManifest}, a...)...)
}

// parseHeader checks the name, version, description and priority and fills them into m.
func parseHeader(r *rawManifest, m *Manifest) error {
	switch {
	case r.Name == nil || *r.Name == "":
		return badManifest("name is required")
	case strings.Contains(*r.Name, "_"):
		return badManifest("name %q contains an underscore: plugin names must not contain underscores (the first _ after plugin_ separates the plugin from the tool)", clip.Bytes(*r.Name, 80))
	case !plugin.ValidName(*r.Name):
		return badManifest("name %q must match [a-z0-9][a-z0-9-]* and be at most %d characters", clip.Bytes(*r.Name, 80), plugin.MaxNameLen)
	}
	m.Name = *r.Name
	if r.Version != nil && *r.Version != "" {
		m.Version = *r.Version
	}
	if r.Description != nil {
		m.Description = *r.Description
	}
	if badText(m.Version) || badText(m.Description) {
		return badManifest("version or description contains control characters or is longer than %d bytes", maxText)
	}
	if r.Priority != nil {
		f, err := r.Priority.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > maxPriority {
			return badManifest("priority %s must be an integer between -%d and %d", clip.Bytes(r.Priority.String(), 80), maxPriority, maxPriority)
		}
		m.Priority = int(f)
	}
	return nil
}

// parseHooks checks the hook names and appends them to m, dropping repeats.
func parseHooks(hooks []string, m *Manifest) error {
	if len(hooks) > MaxHooks {
		return badManifest("%d hooks, more than the %d allowed", len(hooks), MaxHooks)
	}
	seen := map[string]bool{}
	for _, h := range hooks {
		if h == "" || len(h) > maxName || badText(h) || strings.ContainsAny(h, " /") {
			return badManifest("hook name %q is empty, too long or contains spaces, slashes or control characters", clip.Bytes(h, 80))
		}
		if !seen[h] {
			seen[h] = true
			m.Hooks = append(m.Hooks, h)
		}
	}
	return nil
}

// parseTools checks each declared tool and appends it to m; a repeated name is an error
// (unlike hooks) because two tools of one name would be ambiguous to call.
func parseTools(raw []rawTool, m *Manifest) error {
	if len(raw) > MaxTools {
		return badManifest("%d tools, more than the %d allowed", len(raw), MaxTools)
	}
	toolSeen := map[string]bool{}
	for i, rt := range raw {
		if rt.Name == nil || len(*rt.Name) > maxName || !toolNameRe().MatchString(*rt.Name) {
			name := "<missing>"
			if rt.Name != nil {
				name = *rt.Name
			}
			return badManifest("tool %d: name %q must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most %d characters", i+1, clip.Bytes(name, 80), maxName)
		}
		if toolSeen[*rt.Name] {
			return badManifest("tool %q is declared twice", *rt.Name)
		}
		toolSeen[*rt.Name] = true
		t := Tool{Name: *rt.Name, Parameters: []tools.Param{}}
		if rt.Description != nil {
			t.Description = *rt.Description
		}
		if badText(t.Description) {
			return badManifest("tool %q: description contains control characters or is too long", t.Name)
		}
		if err := parseParams(rt.Parameters, &t); err != nil {
			return err
		}
		m.Tools = append(m.Tools, t)
	}
	return nil
}

// parseParams checks one tool's parameters and appends them to t.
func parseParams(raw []rawParam, t *Tool) error {
	if len(raw) > MaxParams {
		return badManifest("tool %q: %d parameters, more than the %d allowed", t.Name, len(raw), MaxParams)
	}
	pSeen := map[string]bool{}
	for j, rp := range raw {
		if rp.Name == nil || *rp.Name == "" || len(*rp.Name) > maxName || badText(*rp.Name) {
			return badManifest("tool %q: parameter %d has no usable name", t.Name, j+1)
		}
		if pSeen[*rp.Name] {
			return badManifest("tool %q: parameter %q is declared twice", t.Name, *rp.Name)
		}
		pSeen[*rp.Name] = true
		p := tools.Param{Name: *rp.Name}
		if rp.Type != nil {
			p.Type = *rp.Type
		}
		if rp.Description != nil {
			p.Description = *rp.Description
		}
		if badText(p.Type) || len(p.Type) > maxName || badText(p.Description) {
			return badManifest("tool %q: parameter %q: type or description contains control characters or is too long", t.Name, p.Name)
		}
		if rp.Required != nil {
			var req bool
			if err := json.Unmarshal(*rp.Required, &req); err != nil {
				return badManifest("tool %q: parameter %q: required must be true or false", t.Name, p.Name)
			}
			p.Required = req
		}
		t.Parameters = append(t.Parameters, p)
	}
	return nil
}

func badText(s string) bool {
	if len(s) > maxText {
		return true
	}
	for _, r := range s {
		if r != '\t' && unicode.IsControl(r) || r == unicode.ReplacementChar {
			return true
		}
	}
	return false
}

// Diff says how o (live) differs from m (recorded), in words, for the refusal message.
func (m *Manifest) Diff(o *Manifest) string {
	var out []string
	field := func(name, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %q -> %q", name, clip.Bytes(a, 80), clip.Bytes(b, 80)))
		}
	}
	field("name", m.Name, o.Name)
	field("version", m.Version, o.Version)
	field("description", m.Description, o.Description)
	if m.Priority != o.Priority {
		out = append(out, fmt.Sprintf("priority %d -> %d", m.Priority, o.Priority))
	}
	if strings.Join(m.Hooks, ",") != strings.Join(o.Hooks, ",") {
		out = append(out, fmt.Sprintf("hooks [%s] -> [%s]", strings.Join(m.Hooks, ", "), strings.Join(o.Hooks, ", ")))
	}
	for _, t := range o.Tools {
		old := m.Tool(t.Name)
		switch {
		case old == nil:
			out = append(out, "new tool "+t.Name)
		case !bytes.Equal(mustJSON(old), mustJSON(&t)):
			out = append(out, "tool "+t.Name+" changed")
		}
	}
	for _, t := range m.Tools {
		if o.Tool(t.Name) == nil {
			out = append(out, "tool "+t.Name+" gone")
		}
	}
	if len(out) == 0 {
		return "no difference"
	}
	return strings.Join(out, "; ")
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
