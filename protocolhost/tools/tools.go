// SPDX-License-Identifier: MIT

// Package tools is the one catalogue of tools fledge hosts, whatever protocol their plugin
// speaks (jsonrpc-2.0, runtime-v1, invoke-v1, mcp, and fledge-v1 commands with typed args).
// Each protocol adapter registers a Provider; `fledge tools`, `fledge serve` and MCP clients
// see one list of tools named plugin_<plugin>_<tool>, with one argument check and one result
// shape. The adapters start their plugins through the session core (package core), so every
// tool call is confined, bounded and audited the same way.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/internal/filestamp"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
)

var (
	// ErrUnknownTool: no installed plugin offers a tool of that name.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrBadArguments: the arguments do not match the tool's declared parameters.
	ErrBadArguments = errors.New("invalid tool arguments")
)

// Param is one declared parameter of a tool.
type Param struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string | number | integer | boolean | object | array | "" (any)
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

// Tool is one tool of one installed plugin.
type Tool struct {
	// Name is the public name: plugin_<plugin>_<tool>.
	Name        string  `json:"name"`
	Plugin      string  `json:"plugin"`
	Tool        string  `json:"tool"` // the plugin's own name for it
	Protocol    string  `json:"protocol"`
	Description string  `json:"description"`
	Params      []Param `json:"parameters"`
	// InputSchema is the JSON Schema of the arguments when the plugin gave one (MCP); when
	// nil, Schema derives one from Params.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// PublicName is the name a tool is listed and called by.
func PublicName(pluginName, tool string) string { return "plugin_" + pluginName + "_" + tool }

// Result is what a tool call gave.
type Result struct {
	// Success is the tool's own verdict (JSON-RPC success, MCP isError false, ...).
	Success bool `json:"success"`
	// Output is the tool's result as JSON (a string result is a JSON string).
	Output json.RawMessage `json:"result"`
	// Reason is the taxonomy code when the call failed for a reason of fledge's (timeout,
	// crashed, malformed_response, ...); "ok" otherwise.
	Reason reason.Code `json:"reason"`
	// Message explains a failure in words the user can act on.
	Message string `json:"message,omitempty"`
}

// Host is what providers need from the command that runs them.
type Host struct {
	Env     *core.Env
	Project *project.Info
	// Stderr receives plugins' stderr and the adapters' warnings (never their stdout).
	Stderr io.Writer

	// changed is told when a plugin's tools may have changed on their own (see Changed).
	changed atomic.Pointer[func(plugin string)]
}

// Changed is how a provider says that a plugin's tools may have changed between two
// listings without anyone asking (an MCP server's tools/list_changed, listed again; a
// server that ended): whoever serves the catalogue (serve --mcp) lists it again, so the
// pins are checked at once and its client is told. Nothing happens when nobody watches.
func (h *Host) Changed(plugin string) {
	if h == nil {
		return
	}
	if f := h.changed.Load(); f != nil {
		(*f)(plugin)
	}
}

// Provider is one protocol adapter's side of the catalogue. A Provider may keep plugin
// processes alive between calls (within one fledge invocation); Close ends them all.
type Provider interface {
	// Tools lists the tools of one installed plugin of this protocol.
	Tools(ctx context.Context, b *core.Binding) ([]Tool, error)
	// Call runs one tool with arguments already checked against its declaration.
	Call(ctx context.Context, b *core.Binding, t Tool, args map[string]any) (*Result, error)
	Close() error
}

// Factory makes a protocol's Provider for one fledge invocation.
type Factory func(h *Host) Provider

var (
	regMu     sync.Mutex
	factories = map[string]Factory{}
	aliases   = map[string]string{}
)

// RegisterAlias makes protocol served by the provider of another (called from the adapter
// package's init): one provider instance for both, so what it keeps per invocation (its
// sessions, their prompts and resources) is one set.
func RegisterAlias(protocol, to string) {
	regMu.Lock()
	defer regMu.Unlock()
	aliases[protocol] = to
}

// Register makes protocol's adapter available (called from the adapter package's init).
func Register(protocol string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	factories[protocol] = f
}

// Registered lists the protocols with a registered provider.
func Registered() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for p := range factories {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Catalogue is every tool of every installed plugin, for one fledge invocation. It is safe
// for concurrent use: listings and lookups take its lock, and a call runs outside it (see
// Call), so concurrent calls overlap (and their durable decisions share fsyncs).
type Catalogue struct {
	// mu guards the maps below and the providers' listings; never held across a call.
	mu        sync.Mutex
	host      *Host
	reg       *plugin.Registry
	providers map[string]Provider
	bindings  map[string]*core.Binding
	// Errors are the plugins whose tools could not be listed (name -> why); the rest of the
	// catalogue is still usable.
	Errors map[string]string
	// quarantined are the tools left out because their definition changed since it was
	// pinned (public name -> the change); warned, the warnings already given.
	quarantined map[string]pins.Change
	// held are the quarantined definitions of DefinitionsProviders, by plugin and name.
	held   map[string]bool
	warned map[string]bool
	// denied are the tools left out by the tool rules (public name -> the decision).
	denied map[string]deniedTool
	// Hooks, when set, run around every call (tools call, serve --mcp).
	Hooks CallHooks
	// serial holds a call of a provider that does not say it takes concurrent calls
	// (ConcurrentCaller): such a provider gets one call at a time, as before.
	serial map[Provider]*sync.Mutex
	// vetted are tools found and let through by Find, kept while what decided them holds
	// (see findKept): the plugin's listing and its pins file, unchanged.
	vetted map[string]vettedTool
}

// vettedTool is a tool Find let through, with the stamps of what decided it.
type vettedTool struct {
	tool    Tool
	b       *core.Binding
	listing any             // the provider's ListingVersion before the listing
	pins    filestamp.Stamp // the pins file's stamp before the check (pinned protocols)
}

// maxVetted bounds the kept tools (one per public name called).
const maxVetted = 1024

// StableListing is a Provider that can say cheaply whether a plugin's listing is the one it
// gave before: ListingVersion returns a value equal to an earlier one only while Tools
// would list the same tools (ok false: it cannot tell, the listing is made again).
type StableListing interface {
	ListingVersion(b *core.Binding) (v any, ok bool)
}

// ConcurrentCaller is a Provider whose Call may run for several calls at once (its sessions
// match answers to requests and its recorder is shared safely). Other providers get their
// calls one at a time.
type ConcurrentCaller interface {
	ConcurrentCalls() bool
}

// NewCatalogue prepares a catalogue over the installed plugins.
func NewCatalogue(h *Host, reg *plugin.Registry) *Catalogue {
	return &Catalogue{host: h, reg: reg, providers: map[string]Provider{}, bindings: map[string]*core.Binding{}, Errors: map[string]string{}}
}

func (c *Catalogue) provider(protocol string) Provider {
	regMu.Lock()
	if to, ok := aliases[protocol]; ok {
		protocol = to
	}
	regMu.Unlock()
	if p, ok := c.providers[protocol]; ok {
		return p
	}
	regMu.Lock()
	f := factories[protocol]
	regMu.Unlock()
	if f == nil {
		return nil
	}
	p := f(c.host)
	c.providers[protocol] = p
	return p
}

// Watch makes f hear of every Changed of this catalogue's providers (nil: nobody). f must
// not block: it is called from the provider's own goroutines.
func (c *Catalogue) Watch(f func(plugin string)) {
	if f == nil {
		c.host.changed.Store(nil)
		return
	}
	c.host.changed.Store(&f)
}

// Provider is this invocation's provider of a protocol (nil if none is registered), for
// what a protocol offers beyond tools (jsonrpc-2.0 hook chains share its live plugins).
func (c *Catalogue) Provider(protocol string) Provider {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.provider(protocol)
}

// Binding returns the verified binding of an installed plugin (cached).
func (c *Catalogue) Binding(name string) (*core.Binding, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.binding(name)
}

func (c *Catalogue) binding(name string) (*core.Binding, error) {
	if b, ok := c.bindings[name]; ok {
		return b, nil
	}
	en := c.reg.Find(name)
	if en == nil {
		return nil, fmt.Errorf("%w: no plugin %q is installed", ErrUnknownTool, name)
	}
	b, err := c.host.Env.Bind(en, c.host.Project)
	if err != nil {
		return nil, err
	}
	c.bindings[name] = b
	return b, nil
}

// List returns every tool, sorted by name. Plugins whose tools cannot be listed are
// reported in c.Errors and left out.
func (c *Catalogue) List(ctx context.Context) []Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Tool
	for _, en := range c.reg.Plugins {
		b, err := c.binding(en.Name)
		if err != nil {
			c.Errors[en.Name] = err.Error()
			continue
		}
		p := c.provider(b.Manifest.Plugin.Protocol)
		if p == nil {
			continue // a protocol without tools (legacy, fledge-v1 without typed args)
		}
		ts, err := p.Tools(ctx, b)
		if err != nil {
			c.Errors[en.Name] = err.Error()
			continue
		}
		out = append(out, c.vet(ctx, b, p, ts)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	// One public name, two plugins (plugin "a" with tool "b_c", plugin "a_b" with tool
	// "c"): neither may shadow the other, so neither is offered.
	kept := out[:0]
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && out[j].Name == out[i].Name {
			j++
		}
		if j-i == 1 {
			kept = append(kept, out[i])
		} else {
			for k := i; k < j; k++ {
				c.Errors[out[k].Plugin] = fmt.Sprintf("%v: %s (not offered; rename or remove one of the plugins)", ErrAmbiguous, out[i].Name)
			}
		}
		i = j
	}
	return kept
}

// Find returns the tool of that public name.
func (c *Catalogue) Find(ctx context.Context, name string) (*Tool, *core.Binding, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.find(ctx, name)
}

func (c *Catalogue) find(ctx context.Context, name string) (*Tool, *core.Binding, error) {
	if !strings.HasPrefix(name, "plugin_") {
		return nil, nil, fmt.Errorf("%w %q: tool names are plugin_<plugin>_<tool> (see 'fledge tools list')", ErrUnknownTool, name)
	}
	if t, b := c.findKept(name); t != nil {
		return t, b, nil
	}
	// What decides the tool, stamped before it is read (a change after the stamp makes the
	// next call look again).
	var (
		listing  any
		listed   bool
		pinStamp filestamp.Stamp
		pinsOK   bool
		splits   int
	)
	// Plugin names may contain '_' (not jsonrpc ones): try every split. Two plugins that
	// both offer the name cannot shadow each other: the call is refused.
	var found *Tool
	var foundB *core.Binding
	rest := strings.TrimPrefix(name, "plugin_")
	for i := len(rest) - 1; i > 0; i-- {
		if rest[i] != '_' {
			continue
		}
		pname := rest[:i]
		if c.reg.Find(pname) == nil {
			continue
		}
		b, err := c.binding(pname)
		if err != nil {
			return nil, nil, err
		}
		p := c.provider(b.Manifest.Plugin.Protocol)
		if p == nil {
			continue
		}
		splits++
		if sl, ok := p.(StableListing); ok {
			listing, listed = sl.ListingVersion(b)
		}
		pinStamp, pinsOK = c.pinsStamp(b)
		ts, err := p.Tools(ctx, b)
		if err != nil {
			return nil, nil, err
		}
		ts = c.vet(ctx, b, p, ts)
		if err := c.quarantine(b, name); err != nil {
			return nil, nil, err
		}
		if err := c.refuseDenied(name); err != nil {
			return nil, nil, err
		}
		for i := range ts {
			if ts[i].Name == name {
				if found != nil {
					return nil, nil, fmt.Errorf("%w %q: plugins %s and %s (neither is offered)", ErrAmbiguous, name, found.Plugin, ts[i].Plugin)
				}
				found, foundB = &ts[i], b
			}
		}
	}
	if found != nil {
		// Kept only when one installed plugin could offer the name (no other listing can
		// make it ambiguous) and both stamps can vouch.
		if splits == 1 && listed && pinsOK {
			if c.vetted == nil || len(c.vetted) >= maxVetted {
				c.vetted = map[string]vettedTool{}
			}
			c.vetted[name] = vettedTool{tool: *found, b: foundB, listing: listing, pins: pinStamp}
		}
		return found, foundB, nil
	}
	return nil, nil, fmt.Errorf("%w %q (see 'fledge tools list')", ErrUnknownTool, name)
}

// findKept is the tool Find let through last time, while the provider says the plugin's
// listing is the same and its pins file has the stamp it had before that check (nil
// otherwise): the same listing, pins and (fixed for the invocation) tool rules decide the
// same, so the listing, its schemas and the pin check are not made again for every call.
func (c *Catalogue) findKept(name string) (*Tool, *core.Binding) {
	v, ok := c.vetted[name]
	if !ok {
		return nil, nil
	}
	sl, ok := c.provider(v.b.Manifest.Plugin.Protocol).(StableListing)
	if !ok {
		return nil, nil
	}
	if ver, ok := sl.ListingVersion(v.b); !ok || ver != v.listing {
		delete(c.vetted, name)
		return nil, nil
	}
	if st, ok := c.pinsStamp(v.b); !ok || st != v.pins {
		delete(c.vetted, name)
		return nil, nil
	}
	t := v.tool
	t.Params = append([]Param(nil), v.tool.Params...)
	return &t, v.b
}

// pinsStamp is the stamp of the plugin's pins file when its protocol is pinned (the zero
// stamp, true, when it is not: nothing on disk decides it), ok false when it cannot vouch
// (no file yet, changed within the last second).
func (c *Catalogue) pinsStamp(b *core.Binding) (filestamp.Stamp, bool) {
	if !pinned[b.Manifest.Plugin.Protocol] {
		return filestamp.Stamp{}, true
	}
	fi, err := os.Lstat(pins.Path(c.host.Env.ConfigDir, b.Entry.Name))
	if err != nil {
		return filestamp.Stamp{}, false
	}
	return filestamp.Of(fi, time.Now())
}

// Call checks args against the tool's declaration and runs it. The lookup holds the
// catalogue's lock; the call itself does not, so calls of a ConcurrentCaller overlap.
func (c *Catalogue) Call(ctx context.Context, name string, args map[string]any) (*Tool, *Result, error) {
	c.mu.Lock()
	t, b, err := c.find(ctx, name)
	var p Provider
	var one *sync.Mutex
	if err == nil {
		p = c.provider(b.Manifest.Plugin.Protocol)
		if cc, ok := p.(ConcurrentCaller); !ok || !cc.ConcurrentCalls() {
			if c.serial == nil {
				c.serial = map[Provider]*sync.Mutex{}
			}
			if one = c.serial[p]; one == nil {
				one = &sync.Mutex{}
				c.serial[p] = one
			}
		}
	}
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if err := Check(t, args); err != nil {
		c.Refuse(b, t, args, err)
		return t, nil, err
	}
	res, err := c.callWithHooks(ctx, p, t, args, func(args map[string]any) (*Result, error) {
		if one != nil {
			one.Lock()
			defer one.Unlock()
		}
		return p.Call(ctx, b, *t, args)
	})
	return t, res, err
}

// Close ends every provider's plugins.
func (c *Catalogue) Close() error {
	c.mu.Lock()
	ps := make([]Provider, 0, len(c.providers))
	for _, p := range c.providers {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Check validates args against the tool's declared parameters: every required one
// present, every present one of its declared type, nothing undeclared. (Tools with a
// JSON Schema of their own are checked by their adapter as well.)
func Check(t *Tool, args map[string]any) error {
	declared := map[string]Param{}
	for _, p := range t.Params {
		declared[p.Name] = p
		if _, ok := args[p.Name]; p.Required && !ok {
			return fmt.Errorf("%w: %s: missing required parameter %q", ErrBadArguments, t.Name, p.Name)
		}
	}
	if len(t.Params) == 0 && t.InputSchema != nil {
		return nil
	}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p, ok := declared[k]
		if !ok {
			return fmt.Errorf("%w: %s: unknown parameter %q", ErrBadArguments, t.Name, k)
		}
		if !TypeMatches(p.Type, args[k]) {
			return fmt.Errorf("%w: %s: parameter %q must be %s, got %s", ErrBadArguments, t.Name, k, p.Type, JSONType(args[k]))
		}
	}
	return nil
}

// TypeMatches reports whether v (decoded JSON) is of the declared type ("" or "any": all).
func TypeMatches(typ string, v any) bool {
	switch strings.ToLower(typ) {
	case "", "any":
		return true
	case "string":
		_, ok := v.(string)
		return ok
	case "number", "float":
		switch v.(type) {
		case float64, json.Number, int, int64:
			return true
		}
		return false
	case "integer", "int":
		switch n := v.(type) {
		case float64:
			return n == float64(int64(n))
		case int, int64:
			return true
		case json.Number:
			_, err := n.Int64()
			return err == nil
		}
		return false
	case "boolean", "bool":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return true // a type fledge does not know is the plugin's to check
}

// JSONType names v's JSON type for messages.
func JSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64, json.Number, int, int64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// Schema is the tool's JSON Schema for its arguments: its own, or one derived from Params.
func Schema(t *Tool) json.RawMessage {
	if t.InputSchema != nil {
		return t.InputSchema
	}
	props := map[string]any{}
	required := []string{}
	for _, p := range t.Params {
		prop := map[string]any{}
		if p.Type != "" && p.Type != "any" {
			prop["type"] = strings.ToLower(p.Type)
		}
		if p.Description != "" {
			prop["description"] = p.Description
		}
		props[p.Name] = prop
		if p.Required {
			required = append(required, p.Name)
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	return b
}

type callTimeoutKey struct{}

// WithCallTimeout asks the adapter to give the tool call itself at most d (already within
// policy's maximum): a plugin's start and handshake keep their own bounds, so a short
// timeout is not spent starting the plugin.
func WithCallTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, callTimeoutKey{}, d)
}

// CallTimeout is the timeout WithCallTimeout set, if any.
func CallTimeout(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(callTimeoutKey{}).(time.Duration)
	return d, ok && d > 0
}

// CallDetails is a tool_call record's details, the same for every protocol: the argument
// names always, their values only when [audit] tool_argument_values says so.
func CallDetails(t Tool, args map[string]any, values bool) map[string]any {
	d := map[string]any{"tool": t.Name, "plugin_tool": t.Tool, "protocol": t.Protocol, "argument_keys": argKeys(args)}
	if values {
		d["arguments"] = args
	}
	return d
}

// argKeys are the argument names, sorted: what the audit log records by default.
func argKeys(args map[string]any) []string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParamsText is a tool's parameters on one line, " (name:type, opt?)", as install and
// `tools list` show them ("" for none).
func ParamsText(ps []Param) string {
	if len(ps) == 0 {
		return ""
	}
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		s := p.Name
		if p.Type != "" {
			s += ":" + p.Type
		}
		if !p.Required {
			s += "?"
		}
		parts = append(parts, s)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Refuse records a call refused before anything was sent (bad arguments): a deny
// tool_call with the argument names and why.
func (c *Catalogue) Refuse(b *core.Binding, t *Tool, args map[string]any, why error) {
	if c.host == nil || c.host.Env == nil || b == nil {
		return
	}
	log, err := c.host.Env.Audit()
	if err != nil {
		return
	}
	_ = c.host.Env.NewRecorder(log, b.Ref, nil).RecordNow(audit.EventToolCall, audit.Deny, reason.BadArguments, RefusalDetails(t, args, why))
}

// RefusalDetails are the details of a tool call refused for its arguments.
func RefusalDetails(t *Tool, args map[string]any, why error) map[string]any {
	d := CallDetails(*t, args, false)
	msg := why.Error()
	if len(msg) > 1024 {
		msg = msg[:1024] + "..."
	}
	d["error"] = msg
	return d
}
