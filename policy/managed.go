// SPDX-License-Identifier: MIT

package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/egress"
)

// The managed policy: a ceiling a machine's administrator sets for every user of fledge on
// it (managed.toml and managed.d/*.toml in ManagedDir, read only when root alone can write
// them). Nothing a user writes (config.toml, plugins.toml, --grant, --yes, plugins grant)
// can go above it; everything it does not name has no ceiling.

const (
	// ManagedFile is the main managed policy file inside ManagedDir.
	ManagedFile = "managed.toml"
	// ManagedDropIns is the directory of further files (*.toml, merged in name order).
	ManagedDropIns = "managed.d"
	// maxManagedFiles bounds managed.d.
	maxManagedFiles = 64
)

// ErrManaged is matched by every refusal of the managed policy: a file fledge will not
// trust, and a plugin, grant, source, tool or setting over its ceiling.
var ErrManaged = errors.New("managed policy")

// ManagedFileInfo is one file of the managed policy, as read.
type ManagedFileInfo struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// NetworkCeiling is [limits] network: the whole network (All, only where the managed file
// itself says true), or at most these destinations (none for false or []).
type NetworkCeiling struct {
	All   bool
	Dests []egress.Dest
}

// Managed is the merged managed policy. A nil *Managed is no policy: every method allows.
type Managed struct {
	Files []ManagedFileInfo
	// Digest is the sha256 of every file's path and content, in order: doctor shows it and
	// every session's first audit record carries it.
	Digest string

	Sources    []string // [sources] allow; nil: not set (every source)
	Exec       *bool
	Filesystem string // "" = no ceiling
	Network    *NetworkCeiling
	// NetworkOverride: [sandbox] network = "allow" permitted (nil: not said; then only a
	// network ceiling forbids it).
	NetworkOverride *bool
	Secrets         []string // names; nil: no ceiling
	SecretsSet      bool
	UnixSockets     *bool

	RequireStrict  bool
	RequireWitness string
	// RequireExport is [require] export ("otlp" or ""): the audit export that must be on.
	// The export code reads it; the setting it requires is its own.
	RequireExport string

	ToolsDeny  []string // plugin:glob
	ToolsAllow []string

	origin map[string]string // "limits.exec" (or "tools.deny:pattern") -> the file that set it
}

// Active reports whether a managed policy is in force.
func (m *Managed) Active() bool { return m != nil && len(m.Files) > 0 }

// Rule names where a setting of the managed policy comes from, for refusals:
// `/etc/fledge/managed.toml: [limits] exec = false`.
func (m *Managed) Rule(key, shown string) string {
	file := m.origin[key]
	if file == "" && len(m.Files) > 0 {
		file = m.Files[0].Path
	}
	k, _, _ := strings.Cut(key, ":")
	return file + ": " + displayKey(k) + " = " + shown
}

// parse reads one managed policy file into m (merging: a key set here replaces the
// same key of an earlier file; [sources] allow and [tools] deny/allow add to earlier ones).
// Unknown tables and keys are errors.
func (m *Managed) parse(file string, data []byte) error {
	src := string(data)
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return &ConfigError{File: file, Line: pe.Position.Line, Col: pe.Position.Col, Msg: "syntax error: " + pe.Message}
		}
		return &ConfigError{File: file, Msg: err.Error()}
	}
	p := &cfgParser{file: file, src: src}
	if m.origin == nil {
		m.origin = map[string]string{}
	}
	known := map[string][]string{
		"sources": {"allow"},
		"limits":  {"exec", "filesystem", "network", "network_override", "secrets", "unix_sockets"},
		"require": {"export", "strict", "witness"},
		"tools":   {"allow", "deny"},
	}
	for _, table := range sortedKeys(raw) {
		keys, ok := known[table]
		if !ok {
			return p.errAt(table, "", "unknown section (known: [sources], [limits], [require], [tools])")
		}
		fields, ok := raw[table].(map[string]any)
		if !ok {
			return p.errAt(table, "", "expected a table, got "+tomlType(raw[table]))
		}
		for _, key := range sortedKeys(fields) {
			if !slices.Contains(keys, key) {
				return p.errAt(table, key, "unknown key (known: "+strings.Join(keys, ", ")+")")
			}
			if msg := m.set(file, table, key, fields[key]); msg != "" {
				return p.errAt(table, key, msg)
			}
		}
	}
	return nil
}

func (m *Managed) set(file, table, key string, v any) string {
	k := table + "." + key
	boolPtr := func(dst **bool) string {
		b, ok := v.(bool)
		if !ok {
			return "expected true or false, got " + tomlType(v)
		}
		*dst = &b
		m.origin[k] = file
		return ""
	}
	switch k {
	case "sources.allow":
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		for _, s := range list {
			if msg := validSourcePattern(s); msg != "" {
				return msg
			}
			m.origin[k+":"+s] = file
		}
		m.Sources = append(append([]string{}, m.Sources...), list...)
		if m.Sources == nil {
			m.Sources = []string{}
		}
		m.origin[k] = file
	case "limits.exec":
		return boolPtr(&m.Exec)
	case "limits.network_override":
		return boolPtr(&m.NetworkOverride)
	case "limits.unix_sockets":
		return boolPtr(&m.UnixSockets)
	case "limits.filesystem":
		s, ok := v.(string)
		if !ok || s == "" || fsRank(s) < 0 {
			return fmt.Sprintf("expected one of \"none\", \"plugin\", \"project\", got %s", showValue(v))
		}
		m.Filesystem = s
		m.origin[k] = file
	case "limits.network":
		switch x := v.(type) {
		case bool:
			m.Network = &NetworkCeiling{All: x}
		default:
			list, msg := stringList(v)
			if msg != "" {
				return "expected true, false or an array of destinations like \"api.github.com:443\", got " + tomlType(v)
			}
			ds, err := egress.ParseList(list)
			if err != nil {
				return err.Error()
			}
			m.Network = &NetworkCeiling{Dests: ds}
		}
		m.origin[k] = file
	case "limits.secrets":
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		for _, n := range list {
			if !ValidSecretName(n) {
				return fmt.Sprintf("%q is not a secret name (an environment variable name)", n)
			}
		}
		m.Secrets, m.SecretsSet = list, true
		m.origin[k] = file
	case "require.strict":
		b, ok := v.(bool)
		if !ok {
			return "expected true or false, got " + tomlType(v)
		}
		m.RequireStrict = b
		m.origin[k] = file
	case "require.witness":
		var w string
		if msg := witnessField(&w)(v); msg != "" {
			return msg
		}
		m.RequireWitness = w
		m.origin[k] = file
	case "require.export":
		s, ok := v.(string)
		if !ok || (s != "otlp" && s != "") {
			return fmt.Sprintf("expected \"otlp\", got %s", showValue(v))
		}
		m.RequireExport = s
		m.origin[k] = file
	case "tools.deny", "tools.allow":
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		for _, s := range list {
			pl, tool, ok := strings.Cut(s, ":")
			if !ok || validGlob(pl) != "" || validGlob(tool) != "" {
				return fmt.Sprintf("%q: expected plugin:tool, each a name or a glob (\"server-filesystem:write_*\", \"*:delete_*\")", s)
			}
			m.origin[k+":"+s] = file
		}
		if key == "deny" {
			m.ToolsDeny = append(m.ToolsDeny, list...)
		} else {
			m.ToolsAllow = append(m.ToolsAllow, list...)
		}
	}
	return ""
}

// ParseManaged parses managed policy files given as (path, content) pairs in order; it is
// LoadManaged without the file system (tests, and the checks of a file an admin writes).
func ParseManaged(files [][2]string) (*Managed, error) {
	if len(files) == 0 {
		return nil, nil
	}
	m := &Managed{}
	h := sha256.New()
	for _, f := range files {
		if err := m.parse(f[0], []byte(f[1])); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(f[1]))
		m.Files = append(m.Files, ManagedFileInfo{Path: f[0], SHA256: hex.EncodeToString(sum[:])})
		fmt.Fprintf(h, "%s\n%x\n", f[0], sum)
	}
	m.Digest = hex.EncodeToString(h.Sum(nil))
	return m, nil
}

// validGlob checks a name glob ('*' any run of characters, '?' one): printable, bounded.
func validGlob(s string) string {
	if s == "" || len(s) > 256 {
		return "empty or longer than 256 characters"
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f {
			return "contains a space or a control character"
		}
	}
	return ""
}

// Glob reports whether name matches pattern: '*' matches any run of characters (none
// included, '/' included), '?' exactly one; everything else itself. The one matcher of
// tool rules and source patterns.
func Glob(pattern, name string) bool {
	// Iterative wildcard matching with one backtrack point: linear in practice, bounded
	// by len(pattern)*len(name) at worst (both bounded).
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Source kinds a managed [sources] allow entry names.
const (
	SourceDir = "dir" // a local directory (or a local executable)
	SourceGit = "git" // a git URL
)

func validSourcePattern(s string) string {
	if s == SourceDir || s == SourceGit {
		return ""
	}
	kind, rest, ok := strings.Cut(s, ":")
	switch {
	case !ok || validGlob(rest) != "":
		return fmt.Sprintf("%q: expected \"dir\", \"git\", \"git:URL-GLOB\", \"npm:PACKAGE-GLOB\", \"pypi:PACKAGE-GLOB\" or \"oci:IMAGE-GLOB\"", s)
	case kind == "npm" || kind == "pypi" || kind == "oci" || kind == "git":
		return ""
	}
	return fmt.Sprintf("%q: unknown source kind %q (known: dir, git, npm, pypi, oci)", s, kind)
}

// AllowSource decides whether a plugin source may be installed: kind is "dir", "git",
// "npm", "pypi" or "oci", name the package (without its version), image or URL. Nil when
// [sources] allow is not set or an entry matches.
func (m *Managed) AllowSource(kind, name string) error {
	if m == nil || m.Sources == nil {
		return nil
	}
	for _, s := range m.Sources {
		switch {
		case s == kind && (kind == SourceDir || kind == SourceGit):
			return nil
		case strings.HasPrefix(s, kind+":") && Glob(strings.TrimPrefix(s, kind+":"), name):
			return nil
		}
	}
	shown := kind
	if kind != SourceDir {
		shown = kind + ":" + name
	}
	list := make([]string, len(m.Sources))
	for i, s := range m.Sources {
		list[i] = fmt.Sprintf("%q", s)
	}
	return &CeilingError{Items: []Violation{{Item: "source " + shown, Rule: m.Rule("sources.allow", "["+strings.Join(list, ", ")+"]")}}}
}

// Violation is one grant (or setting) over the managed ceiling and the rule it breaks.
type Violation struct {
	Item string `json:"item"` // "exec", "network=example.org:443", "filesystem=project", ...
	Rule string `json:"rule"` // "/etc/fledge/managed.toml: [limits] exec = false"
}

// CeilingError is a refusal of the managed policy, naming each item and its rule.
type CeilingError struct {
	Plugin string
	Items  []Violation
}

func (e *CeilingError) Error() string {
	parts := make([]string, len(e.Items))
	for i, v := range e.Items {
		parts[i] = v.Item + " (" + v.Rule + ")"
	}
	who := ""
	if e.Plugin != "" {
		who = "plugin " + e.Plugin + ": "
	}
	return who + "over the managed policy's ceiling: " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrManaged) true.
func (e *CeilingError) Is(target error) bool { return target == ErrManaged }

// Over lists the grants of g (and the read grants beyond the filesystem level) that are
// over the ceiling. Empty when m is nil or nothing is over.
func (m *Managed) Over(g Grants, read []string) []Violation {
	if m == nil {
		return nil
	}
	var out []Violation
	add := func(item, key, shown string) { out = append(out, Violation{Item: item, Rule: m.Rule(key, shown)}) }
	if m.Exec != nil && !*m.Exec && g.Exec {
		add("exec", "limits.exec", "false")
	}
	if m.Filesystem != "" {
		if fsRank(g.FS()) > fsRank(m.Filesystem) {
			add("filesystem="+g.FS(), "limits.filesystem", fmt.Sprintf("%q", m.Filesystem))
		}
		for _, p := range read {
			add("read="+p, "limits.filesystem", fmt.Sprintf("%q", m.Filesystem))
		}
	}
	if n := m.Network; n != nil && !n.All {
		shown := m.networkShown()
		if g.Network {
			add("network", "limits.network", shown)
		}
		for _, d := range g.NetworkTo {
			if !n.covers(d) {
				add("network="+d, "limits.network", shown)
			}
		}
		for _, e := range g.Secrets {
			for _, d := range SecretDests(e) {
				if !n.covers(d) {
					add("secret="+e, "limits.network", shown)
					break
				}
			}
		}
	}
	if m.SecretsSet {
		for _, e := range g.Secrets {
			if !slices.Contains(m.Secrets, SecretName(e)) {
				add("secret="+SecretName(e), "limits.secrets", m.secretsShown())
			}
		}
	}
	return out
}

// CheckGrants is Over as an error (nil when nothing is over).
func (m *Managed) CheckGrants(plugin string, g Grants, read []string) error {
	if v := m.Over(g, read); len(v) > 0 {
		return &CeilingError{Plugin: plugin, Items: v}
	}
	return nil
}

func (m *Managed) networkShown() string {
	if m.Network.All {
		return "true"
	}
	if len(m.Network.Dests) == 0 {
		return "false"
	}
	parts := make([]string, len(m.Network.Dests))
	for i, d := range m.Network.Dests {
		parts[i] = fmt.Sprintf("%q", d.String())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (m *Managed) secretsShown() string {
	parts := make([]string, len(m.Secrets))
	for i, s := range m.Secrets {
		parts[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// covers reports whether the granted destination entry is within the ceiling: its port
// range inside one pattern's, and its hosts inside that pattern's (a name under a wildcard
// or equal to the name, a wildcard under a wider wildcard, an address range inside an
// address range). An entry that does not parse is never covered.
func (n *NetworkCeiling) covers(entry string) bool {
	if n.All {
		return true
	}
	g, err := egress.ParseDest(entry)
	if err != nil {
		return false
	}
	for _, c := range n.Dests {
		if g.PortLo < c.PortLo || g.PortHi > c.PortHi {
			continue
		}
		switch {
		case c.IsAddress():
			if g.IsAddress() && c.Prefix.Bits() <= g.Prefix.Bits() && c.Prefix.Contains(g.Prefix.Addr()) {
				return true
			}
		case g.IsAddress():
		case g.Wildcard:
			if c.Wildcard && (g.Host == c.Host || strings.HasSuffix(g.Host, "."+c.Host)) {
				return true
			}
		case c.MatchesName(g.Host):
			return true
		}
	}
	return false
}

// Constrain holds the user's config to the managed policy: a setting that loosens a
// ceiling is an error naming the setting and the rule (never silently dropped); what the
// policy requires is set (strict, the witness). c.Managed is m afterwards.
func (m *Managed) Constrain(c *Config) error {
	c.Managed = m
	if !m.Active() {
		return nil
	}
	s := &c.Sandbox
	refuse := func(key, what, rule string) error {
		return fmt.Errorf("%w: %s: %s %s is not permitted (%s)", ErrManaged, orDefault(c.File), displayKey(key), what, rule)
	}
	if s.Network == NetworkAllow {
		switch {
		case m.NetworkOverride != nil && !*m.NetworkOverride:
			return refuse("sandbox.network", `= "allow"`, m.Rule("limits.network_override", "false"))
		case m.Network != nil && !m.Network.All:
			return refuse("sandbox.network", `= "allow"`, m.Rule("limits.network", m.networkShown()))
		}
	}
	if s.UnixSockets == NetworkAllow && m.UnixSockets != nil && !*m.UnixSockets {
		return refuse("sandbox.unix_sockets", `= "allow"`, m.Rule("limits.unix_sockets", "false"))
	}
	if m.Filesystem != "" {
		rule := m.Rule("limits.filesystem", fmt.Sprintf("%q", m.Filesystem))
		switch {
		case len(s.ReadWrite) > 0:
			return refuse("sandbox.read_write", "(more places to write)", rule)
		case len(s.ReadOnly) > 0:
			return refuse("sandbox.read_only", "(more places to read)", rule)
		case len(s.Unprotect) > 0:
			return refuse("sandbox.unprotect", "(protected paths opened)", rule)
		}
	}
	if s.Legacy == LegacyUnconfined {
		if key, shown := m.anyLimit(); key != "" {
			return refuse("sandbox.legacy", `= "unconfined" (runs legacy plugins outside every ceiling)`, m.Rule(key, shown))
		}
	}
	if m.RequireStrict {
		if c.set["sandbox.strict"] && !s.Strict {
			return refuse("sandbox.strict", "= false", m.Rule("require.strict", "true"))
		}
		s.Strict = true
	}
	if m.RequireWitness != "" {
		if a := c.Audit.Witness; a != "" && a != m.RequireWitness {
			return refuse("audit.witness", fmt.Sprintf("= %q", a), m.Rule("require.witness", fmt.Sprintf("%q", m.RequireWitness)))
		}
		c.Audit.Witness = m.RequireWitness
	}
	if m.RequireExport != "" {
		// The log leaves the machine whatever the user's config says; the user still picks
		// the collector (otlp_endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT) and its headers.
		if c.set["audit.export"] && c.Audit.Export != m.RequireExport {
			return refuse("audit.export", fmt.Sprintf("= %q", c.Audit.Export), m.Rule("require.export", fmt.Sprintf("%q", m.RequireExport)))
		}
		c.Audit.Export = m.RequireExport
	}
	return nil
}

// anyLimit is the first ceiling of [limits] that is set (key and value as written), or "".
func (m *Managed) anyLimit() (key, shown string) {
	switch {
	case m.Exec != nil:
		return "limits.exec", fmt.Sprint(*m.Exec)
	case m.Filesystem != "":
		return "limits.filesystem", fmt.Sprintf("%q", m.Filesystem)
	case m.Network != nil:
		return "limits.network", m.networkShown()
	case m.SecretsSet:
		return "limits.secrets", m.secretsShown()
	case m.UnixSockets != nil:
		return "limits.unix_sockets", fmt.Sprint(*m.UnixSockets)
	case m.NetworkOverride != nil:
		return "limits.network_override", fmt.Sprint(*m.NetworkOverride)
	}
	return "", ""
}

func orDefault(file string) string {
	if file == "" {
		return "config.toml"
	}
	return file
}

// CheckPlugin is CheckGrants for an installed (or installing) plugin: a legacy plugin (no
// protocol) holds no capabilities but runs as a whole program with a command's access, so
// it is held to the exec ceiling as if it held exec.
func (m *Managed) CheckPlugin(plugin string, legacy bool, g Grants, read []string) error {
	if legacy {
		g = Grants{Exec: true, Filesystem: FilesystemNone}
	}
	v := m.Over(g, read)
	for i := range v {
		if legacy && v[i].Item == "exec" {
			v[i].Item = "exec (a plugin without a protocol runs as a whole program, with a command's access)"
		}
	}
	if len(v) > 0 {
		return &CeilingError{Plugin: plugin, Items: v}
	}
	return nil
}

// RequiredExport is [require] export ("otlp"), "" when no managed policy requires one
// (nil-safe): what the audit export's configuration is held to.
func (m *Managed) RequiredExport() string {
	if m == nil {
		return ""
	}
	return m.RequireExport
}
