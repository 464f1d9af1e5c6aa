// SPDX-License-Identifier: MIT

// Package plugin manages installed plugins: the plugin.toml manifest, the plugins.toml
// registry of what was installed and granted, install/remove, and each plugin's state.json
// key/value store. Everything a plugin author controls (manifest, files, names) is treated as
// hostile input; everything the host owns is written atomically and never through a symlink.
package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
)

// ManifestFile is the manifest's name inside a plugin dir.
const ManifestFile = "plugin.toml"

// Manifest bounds: generous for real plugins, small enough that a hostile one is cheap.
const (
	MaxManifestBytes = 256 << 10
	MaxNameLen       = 64
	MaxCommands      = 256
	MaxFieldLen      = 4096
)

var (
	// ErrInvalidManifest: plugin.toml cannot be used (syntax, types, or a failed check).
	ErrInvalidManifest = errors.New("invalid plugin.toml")
	// ErrMissingBinary: a command's binary is not a regular file inside the plugin dir.
	ErrMissingBinary = errors.New("command binary missing")
	// ErrUnsupportedProtocol: plugin.toml asks for a protocol this fledge does not speak.
	ErrUnsupportedProtocol = errors.New("unsupported plugin protocol")
)

// RuntimeWasm is [plugin] runtime for a plugin compiled to WebAssembly (wasm32-wasip1): its
// command binaries are .wasm modules run by fledge's WASM runtime (package wasm), not executed.
// No runtime means a native executable.
const RuntimeWasm = "wasm"

// reservedCommands are fledge's own subcommands: a plugin command by these names could never
// be run and would confuse the user.
var reservedCommands = map[string]bool{
	"run": true, "plugins": true, "audit": true, "doctor": true, "help": true,
	"completion": true, "version": true, "tools": true, "hooks": true, "serve": true,
	"invoke": true,
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var nameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`) })

// ValidName reports whether s is a valid plugin or command name: [a-z0-9][a-z0-9_-]*, at most
// 64 bytes. Such a name is always safe as a single path component.
func ValidName(s string) bool { return len(s) <= MaxNameLen && nameRe().MatchString(s) }

// Manifest is a parsed plugin.toml.
type Manifest struct {
	Plugin       Meta           `toml:"plugin"`
	Commands     []Command      `toml:"commands"`
	Hooks        map[string]any `toml:"hooks"` // raw, shown at install, run only when asked
	Capabilities Capabilities   `toml:"capabilities"`
	Tools        []ToolDecl     `toml:"tools"`
	// Remote is [remote]: where a protocol = "mcp-remote" plugin's server is (remote.go).
	Remote Remote       `toml:"remote"`
	Image  *ImageConfig `toml:"image"` // runtime = "oci" only (manifest_image.go)

	raw []byte
	// fsMentioned: [capabilities] names filesystem (even as "none"); when it does not, a
	// fledge-v1 plugin gets policy.FilesystemDefault.
	fsMentioned bool
}

// Meta is the [plugin] table.
type Meta struct {
	Name        string `toml:"name"`
	Version     string `toml:"version"`
	Description string `toml:"description"`
	Author      string `toml:"author"`
	Protocol    string `toml:"protocol"` // "" = legacy, or one of Protocols
	Runtime     string `toml:"runtime"`  // "" = native, or "wasm"
	// Transport is how a protocol is carried: "" or "stdio" (the default), "tcp" (invoke-v1).
	Transport string `toml:"transport"`
	// Timeout is the plugin's own per-call timeout (e.g. "30s"), within policy's maximum.
	Timeout string `toml:"timeout"`
}

// The plugin protocols fledge hosts (the [plugin] protocol key). "" is a legacy plugin.
const (
	ProtocolFledgeV1 = protocol.Version
	ProtocolJSONRPC  = "jsonrpc-2.0"
	ProtocolRuntime  = "runtime-v1"
	ProtocolInvoke   = "invoke-v1"
	ProtocolMCP      = "mcp"
	// ProtocolMCPRemote is an MCP server reached over Streamable HTTP at [remote] url:
	// fledge itself connects to it; no process of the plugin's runs (remote.go).
	ProtocolMCPRemote = "mcp-remote"
)

// SpeaksMCP reports whether a plugin of this protocol is an MCP server, local (mcp) or
// remote (mcp-remote): its tools' results, prompts and resources pass through as MCP's, and
// it may be granted the MCP client capabilities (sampling, elicitation).
func SpeaksMCP(protocol string) bool {
	return protocol == ProtocolMCP || protocol == ProtocolMCPRemote
}

// Protocols are the protocol values a manifest may declare.
var Protocols = []string{ProtocolFledgeV1, ProtocolJSONRPC, ProtocolRuntime, ProtocolInvoke, ProtocolMCP, ProtocolMCPRemote}

// KnownProtocol reports whether p is "" (legacy) or one of Protocols.
func KnownProtocol(p string) bool {
	if p == "" {
		return true
	}
	for _, k := range Protocols {
		if k == p {
			return true
		}
	}
	return false
}

// Arg is one typed argument a command declares ([[commands.args]]), so it can be offered as
// a tool with a schema.
type Arg struct {
	Name        string `toml:"name" json:"name"`
	Type        string `toml:"type" json:"type,omitempty"` // string | number | integer | boolean
	Description string `toml:"description" json:"description,omitempty"`
	Required    bool   `toml:"required" json:"required,omitempty"`
	Default     any    `toml:"default" json:"default,omitempty"`
}

// ToolDecl is one [[tools]] entry: a tool a plugin offers (invoke-v1 plugins list theirs in
// plugin.toml; others are learned from the plugin's handshake).
type ToolDecl struct {
	Name        string  `toml:"name" json:"name"`
	Description string  `toml:"description" json:"description,omitempty"`
	Parameters  []Param `toml:"parameters" json:"parameters,omitempty"`
}

// Param is one parameter of a declared tool.
type Param struct {
	Name        string `toml:"name" json:"name"`
	Type        string `toml:"type" json:"type"`
	Description string `toml:"description" json:"description,omitempty"`
	Required    bool   `toml:"required" json:"required,omitempty"`
}

// Command is one [[commands]] entry.
type Command struct {
	Name        string `toml:"name" json:"name"`
	Description string `toml:"description" json:"description,omitempty"`
	Binary      string `toml:"binary" json:"binary"` // relative to the plugin dir
	// Args are the command's typed arguments (optional), as published plugins declare them.
	Args []Arg `toml:"args" json:"args,omitempty"`
}

// Capabilities is the [capabilities] table: what the plugin declares it needs.
type Capabilities struct {
	Exec       bool       `toml:"exec"`
	Store      bool       `toml:"store"`
	Metadata   bool       `toml:"metadata"`
	Network    NetworkCap `toml:"network"`
	Filesystem string     `toml:"filesystem"`
	// Secrets are environment variable names the plugin process needs ("GITHUB_TOKEN"),
	// each granted by name and passed to that process only.
	Secrets []string `toml:"secrets"`
}

// MaxSecrets bounds [capabilities] secrets.
const MaxSecrets = 32

// NetworkCap is [capabilities] network: false, true (everything), or a list of
// destinations ("api.github.com:443", "*.example.org:443", "10.0.0.0/8:5432",
// "db.internal:5432-5433"; package egress). Entries are checked in validate.
type NetworkCap struct {
	All bool
	To  []string
	bad string // why the value has neither shape (reported by validate with the file)
}

// UnmarshalTOML reads a boolean or an array of strings.
func (n *NetworkCap) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		n.All = x
	case []any:
		if len(x) > egress.MaxDestinations {
			n.bad = fmt.Sprintf("more than %d destinations", egress.MaxDestinations)
			return nil
		}
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				n.bad = fmt.Sprintf("entry %v is not a string", e)
				return nil
			}
			n.To = append(n.To, s)
		}
	default:
		n.bad = "must be false, true or a list of \"host:port\" destinations"
	}
	return nil
}

// Hook is one [hooks] entry rendered for display.
type Hook struct {
	Name    string
	Command string
	// Offline: the hook gets no network at all (install scripts of an npm package fetched
	// already: they need none, and a script that phones home must not).
	Offline bool
	// NetworkTo, when set, are the only destinations ("host:port") the hook reaches, by
	// name, through fledge's network by destination (an npm package's install scripts reach
	// the registry npm is configured for, and nothing else).
	NetworkTo []string
}

// Declared returns the declared capabilities as grants.
func (m *Manifest) Declared() policy.Grants {
	c := m.Capabilities
	g := policy.Grants{Exec: c.Exec, Store: c.Store, Metadata: c.Metadata, Network: c.Network.All, Filesystem: c.Filesystem}
	if !c.Network.All {
		if _, _, err := egress.ParseEntries(c.Network.To); err == nil && len(c.Network.To) > 0 {
			g.NetworkTo = egress.CanonEntries(c.Network.To)
		}
	}
	for _, n := range c.Secrets {
		if name, dests, err := policy.ParseSecretEntry(n); err == nil {
			n = policy.SecretEntry(name, dests)
		}
		if !slices.Contains(g.Secrets, n) {
			g.Secrets = append(g.Secrets, n)
		}
	}
	g.Filesystem = g.FS()
	return g
}

// FilesystemDefaulted reports whether the plugin gets the default filesystem level
// (policy.FilesystemDefault) because its manifest does not mention filesystem. Only fledge-v1
// plugins: a legacy plugin runs as a whole program under its own profile, without grants.
func (m *Manifest) FilesystemDefaulted() bool { return m.IsProtocol() && !m.fsMentioned }

// Asked is what the plugin asks for: the declared capabilities, with the default filesystem
// level when the manifest does not mention filesystem. Grants within Asked need no warning.
func (m *Manifest) Asked() policy.Grants {
	g := m.Declared()
	if m.FilesystemDefaulted() {
		g.Filesystem = policy.FilesystemDefault
	}
	return g
}

// IsWasm reports whether the plugin's commands are WASM modules.
func (m *Manifest) IsWasm() bool { return m.Plugin.Runtime == RuntimeWasm }

// IsProtocol reports whether the plugin speaks fledge-v1 (false: a legacy plugin).
func (m *Manifest) IsProtocol() bool { return m.Plugin.Protocol == protocol.Version }

// HoldsGrants reports whether capabilities apply to the plugin: every protocol (fledge-v1,
// WASM, jsonrpc-2.0, runtime-v1, invoke-v1, mcp) runs under the grants in plugins.toml; only
// a legacy plugin (no protocol) runs as a whole program under the legacy profile.
func (m *Manifest) HoldsGrants() bool { return m.Plugin.Protocol != "" }

// Raw returns the exact bytes the manifest was parsed from.
func (m *Manifest) Raw() []byte { return m.raw }

// SHA256 is the hex digest of the manifest bytes (recorded as the approved manifest).
func (m *Manifest) SHA256() string {
	sum := sha256.Sum256(m.raw)
	return hex.EncodeToString(sum[:])
}

// Command returns the named command, or nil.
func (m *Manifest) Command(name string) *Command {
	for i := range m.Commands {
		if m.Commands[i].Name == name {
			return &m.Commands[i]
		}
	}
	return nil
}

// CommandNames lists the command names in manifest order.
func (m *Manifest) CommandNames() []string {
	out := make([]string, len(m.Commands))
	for i, c := range m.Commands {
		out[i] = c.Name
	}
	return out
}

// HookList renders [hooks] for display, sorted by name. A string is the command; an array of
// strings is several commands joined with " && "; anything else is shown as written.
func (m *Manifest) HookList() []Hook {
	names := make([]string, 0, len(m.Hooks))
	for k := range m.Hooks {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]Hook, 0, len(names))
	for _, n := range names {
		out = append(out, Hook{Name: n, Command: hookCommand(m.Hooks[n])})
	}
	return out
}

func hookCommand(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			parts = append(parts, hookCommand(e))
		}
		return strings.Join(parts, " && ")
	}
	return fmt.Sprintf("%v", v)
}

// ParseManifest parses and validates plugin.toml content. Unknown keys become warnings
// (plugins written for newer hosts must still install), except where a typo would change
// the meaning silently: an unknown key in [plugin] or [capabilities], or a section one or
// two edits from a known one, is an error naming the closest known name. Errors wrap ErrInvalidManifest
// or ErrUnsupportedProtocol. Binary paths are checked for shape only; LoadManifest also checks
// that they exist inside the plugin dir.
func ParseManifest(data []byte) (*Manifest, []string, error) {
	if len(data) > MaxManifestBytes {
		return nil, nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrInvalidManifest, len(data), MaxManifestBytes)
	}
	var m Manifest
	md, err := toml.Decode(string(data), &m)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("%w: line %d: %s", ErrInvalidManifest, pe.Position.Line, pe.Message)
		}
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	m.raw = append([]byte(nil), data...)
	m.fsMentioned = md.IsDefined("capabilities", "filesystem")

	var warnings []string
	var reported []toml.Key
undecoded:
	for _, k := range md.Undecoded() {
		for _, r := range reported {
			if len(k) > len(r) && toml.Key(k[:len(r)]).String() == r.String() {
				continue undecoded // a child of a table already reported
			}
		}
		reported = append(reported, k)
		if err := unknownKeyError(md, k); err != nil {
			return nil, warnings, err
		}
		if len(warnings) < 32 {
			warnings = append(warnings, fmt.Sprintf("plugin.toml: unknown key %q ignored", k.String()))
		}
	}
	if len(reported) > 32 {
		warnings = append(warnings, fmt.Sprintf("plugin.toml: %d more unknown keys ignored", len(reported)-32))
	}
	if err := m.validate(); err != nil {
		return nil, warnings, err
	}
	return &m, warnings, nil
}

func badText(s string) bool {
	if len(s) > MaxFieldLen {
		return true
	}
	for _, r := range s {
		if r != '\t' && unicode.IsControl(r) || r == unicode.ReplacementChar {
			return true
		}
	}
	return false
}

func (m *Manifest) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidManifest}, args...)...)
	}
	p := m.Plugin
	switch {
	case p.Name == "":
		return bad("[plugin] name is missing")
	case !ValidName(p.Name):
		return bad("[plugin] name %q must match [a-z0-9][a-z0-9_-]* and be at most %d characters", clip.Bytes(p.Name, 80), MaxNameLen)
	}
	if !KnownProtocol(p.Protocol) {
		return fmt.Errorf("%w: plugin %q declares protocol %q, but this fledge only speaks %s; upgrade fledge to run it",
			ErrUnsupportedProtocol, p.Name, clip.Bytes(p.Protocol, 80), strings.Join(Protocols, ", "))
	}
	switch p.Transport {
	case "", "stdio", "tcp":
	default:
		return bad("[plugin] transport = %q: expected \"stdio\" or \"tcp\"", clip.Bytes(p.Transport, 80))
	}
	for field, v := range map[string]string{"version": p.Version, "description": p.Description, "author": p.Author, "runtime": p.Runtime} {
		if badText(v) {
			return bad("[plugin] %s contains control characters or is longer than %d bytes", field, MaxFieldLen)
		}
	}
	switch p.Runtime {
	case "":
	case RuntimeWasm:
		// A module talks fledge-v1 through its host functions; there is no legacy WASM plugin.
		if p.Protocol != protocol.Version {
			return bad("[plugin] runtime = %q needs protocol = %q", RuntimeWasm, protocol.Version)
		}
	case RuntimeOCI:
		if p.Protocol != ProtocolMCP {
			return bad("[plugin] runtime = %q needs protocol = %q", RuntimeOCI, ProtocolMCP)
		}
		if err := m.Image.check(); err != nil {
			return bad("%v", err)
		}
	default:
		return bad("[plugin] runtime = %q: this fledge runs native plugins (no runtime), runtime = %q and runtime = %q", clip.Bytes(p.Runtime, 80), RuntimeWasm, RuntimeOCI)
	}
	if m.Image != nil && p.Runtime != RuntimeOCI {
		return bad("[image] needs [plugin] runtime = %q", RuntimeOCI)
	}
	if nc := m.Capabilities.Network; nc.bad != "" {
		return bad("plugin.toml: [capabilities] network %s", nc.bad)
	} else if _, _, err := egress.ParseEntries(nc.To); err != nil {
		// Every bad entry, each with why (errors.Join: one per line).
		return bad("plugin.toml: [capabilities] network: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(m.Capabilities.Secrets) > MaxSecrets {
		return bad("plugin.toml: [capabilities] secrets: more than %d", MaxSecrets)
	}
	seenSecret := map[string]bool{}
	for _, n := range m.Capabilities.Secrets {
		name, _, err := policy.ParseSecretEntry(n)
		if err != nil {
			return bad("plugin.toml: [capabilities] secrets entry %q: %s", clip.Bytes(n, 80), strings.TrimPrefix(err.Error(), policy.ErrUnknownCapability.Error()+": "))
		}
		if seenSecret[name] {
			return bad("plugin.toml: [capabilities] secrets: %s is listed twice", name)
		}
		seenSecret[name] = true
	}
	if !policy.ValidFilesystem(m.Capabilities.Filesystem) {
		return bad("[capabilities] filesystem = %q: expected \"none\", \"plugin\", \"project\" or \"project-rw\"", clip.Bytes(m.Capabilities.Filesystem, 80))
	}
	if err := m.checkRemote(); err != nil {
		return bad("%v", err)
	}
	if err := m.checkCommands(); err != nil {
		return bad("%v", err)
	}
	for name, v := range m.Hooks {
		if badText(name) || badText(hookCommand(v)) {
			return bad("[hooks] %q contains control characters or is too long", clip.Bytes(name, 80))
		}
	}
	return nil
}

// checkCommands checks [[commands]]: at least one (but for a remote MCP server, which runs
// none), bounded, each named validly and once, its binary a relative path inside the plugin.
func (m *Manifest) checkCommands() error {
	if len(m.Commands) == 0 && m.Plugin.Protocol != ProtocolMCPRemote {
		return errors.New("no [[commands]] declared")
	}
	if len(m.Commands) > MaxCommands {
		return fmt.Errorf("%d commands, more than the %d allowed", len(m.Commands), MaxCommands)
	}
	seen := map[string]bool{}
	for i, c := range m.Commands {
		switch {
		case !ValidName(c.Name):
			return fmt.Errorf("command %d: name %q must match [a-z0-9][a-z0-9_-]* and be at most %d characters", i+1, clip.Bytes(c.Name, 80), MaxNameLen)
		case reservedCommands[c.Name]:
			return fmt.Errorf("command %q is one of fledge's own commands", c.Name)
		case seen[c.Name]:
			return fmt.Errorf("command %q is declared twice", c.Name)
		case badText(c.Description):
			return fmt.Errorf("command %q: description contains control characters or is too long", c.Name)
		}
		seen[c.Name] = true
		if err := checkBinaryPath(c.Binary); err != nil {
			return fmt.Errorf("command %q: %v", c.Name, err)
		}
	}
	return nil
}

// checkBinaryPath checks a command binary's shape: relative, no "..", no NUL.
func checkBinaryPath(b string) error {
	switch {
	case b == "":
		return errors.New("binary is missing")
	case strings.ContainsRune(b, 0) || badText(b):
		return errors.New("binary contains control characters")
	case filepath.IsAbs(b) || strings.HasPrefix(b, "/"):
		return fmt.Errorf("binary %q must be relative to the plugin dir", b)
	case !filepath.IsLocal(b):
		return fmt.Errorf("binary %q escapes the plugin dir", b)
	}
	return nil
}

// LoadManifest reads and validates <dir>/plugin.toml, and checks that every command binary
// exists inside dir as a regular file after resolving symlinks (through os.Root, so a link
// that leaves the dir fails). Warnings include non-executable binaries.
func LoadManifest(dir string) (*Manifest, []string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open plugin dir: %w", err)
	}
	defer root.Close()
	f, err := root.Open(ManifestFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s %s", ErrInvalidManifest, ManifestFile, fsProblem(err))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", ManifestFile, err)
	}
	m, warnings, err := ParseManifest(data)
	if err != nil {
		return nil, warnings, err
	}
	for _, c := range m.Commands {
		st, err := root.Stat(c.Binary)
		if err != nil {
			return nil, warnings, fmt.Errorf("%w: %w: command %q: binary %q %s%s", ErrInvalidManifest, ErrMissingBinary, c.Name, c.Binary, fsProblem(err), nearbyFile(root, c.Binary))
		}
		if !st.Mode().IsRegular() {
			return nil, warnings, fmt.Errorf("%w: %w: command %q: binary %q is not a regular file", ErrInvalidManifest, ErrMissingBinary, c.Name, c.Binary)
		}
		if st.Mode().Perm()&0o111 == 0 && m.Plugin.Runtime == "" {
			warnings = append(warnings, fmt.Sprintf("command %q: binary %q is not executable", c.Name, c.Binary))
		}
	}
	return m, warnings, nil
}

// MarshalTOML writes the value back in the shape it was read in (a boolean or a list).
func (n NetworkCap) MarshalTOML() ([]byte, error) {
	if len(n.To) == 0 {
		return []byte(strconv.FormatBool(n.All)), nil
	}
	q := make([]string, len(n.To))
	for i, d := range n.To {
		q[i] = strconv.Quote(d)
	}
	return []byte("[" + strings.Join(q, ", ") + "]"), nil
}
