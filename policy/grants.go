// SPDX-License-Identifier: MIT

// Package policy holds fledge's pure decisions: which capabilities a plugin holds, what a
// confined process may touch, which environment it sees, the limits from config.toml, and
// the ceilings of the machine's managed policy (managed.go) and the tool rules
// (toolrules.go). Apart from reading config.toml and the managed policy's files it makes no
// OS calls, so every decision is table-testable.
package policy

import (
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/egress"
	"slices"
	"strings"
)

// Filesystem grant levels, weakest first.
const (
	FilesystemNone    = "none"    // no project access at all
	FilesystemPlugin  = "plugin"  // only the plugin's private data dir (which it always has)
	FilesystemProject = "project" // read-only access to the project
	// FilesystemProjectRW lets the plugin process itself write the project, with the
	// protected paths (git metadata, hooks, configs) read-only as for commands: the
	// sandbox protects every writable root the same way.
	FilesystemProjectRW = "project-rw"
)

// FilesystemDefault is the level a fledge-v1 plugin gets when its manifest does not mention
// filesystem at all. Plugins written for the Rust fledge host read the project root delivered
// in init from their own process; the default keeps that working, read-only: writes still go
// through exec or need nothing less than an explicit grant. An explicit filesystem = "none"
// is honoured as written.
const FilesystemDefault = FilesystemProject

// DescribeDefaultFilesystem is how the default rule is shown (install, docs).
const DescribeDefaultFilesystem = "reads the project (read-only, default)"

// FilesystemDeclared is what a bare "filesystem" item in a grant list parses to: "whatever
// level the manifest declares". Grants.Resolve replaces it with the declared level.
const FilesystemDeclared = "declared"

var (
	// ErrUnknownCapability: a grant list names something that is not a capability.
	ErrUnknownCapability = errors.New("unknown capability")
	// ErrNotDeclared: a grant asks for more than the manifest declares.
	ErrNotDeclared = errors.New("capability not declared by the plugin")
)

// Grants is a set of capabilities: what a manifest declares, or what the user granted.
type Grants struct {
	Exec     bool `toml:"exec" json:"exec"`
	Store    bool `toml:"store" json:"store"`
	Metadata bool `toml:"metadata" json:"metadata"`
	Network  bool `toml:"network" json:"network"`
	// NetworkTo are the destinations granted when Network (everything) is not
	// ("api.github.com:443", "*.example.org:443", "10.0.0.0/8:5432"; package egress).
	NetworkTo []string `toml:"network_to,omitempty" json:"network_to,omitempty"`
	// Secrets are environment variable names passed to the plugin process only (from the
	// user's environment or fledge's secret store), never to its commands or another plugin.
	Secrets    []string `toml:"secrets,omitempty" json:"secrets,omitempty"`
	Filesystem string   `toml:"filesystem" json:"filesystem"` // none | plugin | project | project-rw ("" = none)
	// Sampling and Elicitation are MCP client capabilities: an MCP server's
	// sampling/createMessage and elicitation/create requests are passed to fledge's own
	// MCP client only when granted. They reach no sandbox: any MCP plugin may be granted
	// them whether or not its manifest mentions them (ClientCapability).
	Sampling    bool `toml:"sampling,omitempty" json:"sampling,omitempty"`
	Elicitation bool `toml:"elicitation,omitempty" json:"elicitation,omitempty"`
}

// Client capability names (Grants.Sampling, Grants.Elicitation).
const (
	CapSampling    = "sampling"
	CapElicitation = "elicitation"
)

// ClientCapabilities are g's MCP client capabilities alone.
func (g Grants) ClientCapabilities() Grants {
	return Grants{Sampling: g.Sampling, Elicitation: g.Elicitation, Filesystem: FilesystemNone}
}

// WithoutClientCapabilities is g without its MCP client capabilities (what the manifest
// must declare).
func (g Grants) WithoutClientCapabilities() Grants {
	g.Sampling, g.Elicitation = false, false
	return g
}

// ClientCapability reports whether item names an MCP client capability (sampling,
// elicitation): grantable to any MCP plugin, declared or not.
func ClientCapability(item string) bool {
	item = strings.ToLower(strings.TrimSpace(item))
	return item == CapSampling || item == CapElicitation
}

// fsRank orders filesystem levels; -1 for an unknown level.
func fsRank(level string) int {
	switch level {
	case "", FilesystemNone:
		return 0
	case FilesystemPlugin:
		return 1
	case FilesystemProject:
		return 2
	case FilesystemProjectRW:
		return 3
	}
	return -1
}

// ReadsProject reports whether the plugin process may read the project (project or
// project-rw).
func (g Grants) ReadsProject() bool { return fsRank(g.FS()) >= fsRank(FilesystemProject) }

// WritesProject reports whether the plugin process may write the project (project-rw).
func (g Grants) WritesProject() bool { return g.FS() == FilesystemProjectRW }

// FilesystemLevels is how the known levels are listed in messages.
const FilesystemLevels = "none, plugin, project, project-rw"

// ValidFilesystem reports whether level is a known filesystem grant ("" counts as none).
func ValidFilesystem(level string) bool { return fsRank(level) >= 0 }

// FS returns the filesystem level with "" normalised to "none".
func (g Grants) FS() string {
	if g.Filesystem == "" {
		return FilesystemNone
	}
	return g.Filesystem
}

// Empty reports whether g grants nothing.
func (g Grants) Empty() bool { return len(g.Names()) == 0 }

// Names lists the granted items in a fixed order, in the same spelling ParseGrantList reads:
// exec, store, metadata, network, filesystem=<level>. The filesystem item appears only when
// the level is above none.
func (g Grants) Names() []string {
	out := []string{} // never nil: audit records list [] for no capabilities, not null
	if g.Exec {
		out = append(out, "exec")
	}
	if g.Store {
		out = append(out, "store")
	}
	if g.Metadata {
		out = append(out, "metadata")
	}
	if g.Network {
		out = append(out, "network")
	}
	for _, d := range g.NetworkTo {
		out = append(out, "network="+d)
	}
	for _, n := range g.Secrets {
		out = append(out, "secret="+n)
	}
	if fs := g.FS(); fs != FilesystemNone {
		out = append(out, "filesystem="+fs)
	}
	if g.Sampling {
		out = append(out, CapSampling)
	}
	if g.Elicitation {
		out = append(out, CapElicitation)
	}
	return out
}

// String is the comma-separated Names, or "none".
func (g Grants) String() string {
	n := g.Names()
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ",")
}

// Subset reports whether every capability in g is also in of. Filesystem levels are ordered
// none < plugin < project < project-rw; an unknown level is never a subset.
func (g Grants) Subset(of Grants) bool {
	if (g.Sampling && !of.Sampling) || (g.Elicitation && !of.Elicitation) {
		return false
	}
	if (g.Exec && !of.Exec) || (g.Store && !of.Store) || (g.Metadata && !of.Metadata) ||
		(g.Network && !of.Network) {
		return false
	}
	for _, d := range g.NetworkTo {
		if !of.Network && !slices.Contains(of.NetworkTo, d) {
			return false
		}
	}
	for _, n := range g.Secrets {
		if !secretWithin(n, of.Secrets) {
			return false
		}
	}
	r, ro := fsRank(g.Filesystem), fsRank(of.Filesystem)
	return r >= 0 && ro >= 0 && r <= ro
}

// Missing lists the items of g that of does not contain (for error messages).
func (g Grants) Missing(of Grants) []string {
	var out []string
	add := func(have, ok bool, name string) {
		if have && !ok {
			out = append(out, name)
		}
	}
	add(g.Exec, of.Exec, "exec")
	add(g.Store, of.Store, "store")
	add(g.Metadata, of.Metadata, "metadata")
	add(g.Network, of.Network, "network")
	add(g.Sampling, of.Sampling, CapSampling)
	add(g.Elicitation, of.Elicitation, CapElicitation)
	for _, d := range g.NetworkTo {
		add(true, of.Network || slices.Contains(of.NetworkTo, d), "network="+d)
	}
	for _, n := range g.Secrets {
		add(true, secretWithin(n, of.Secrets), "secret="+n)
	}
	r, ro := fsRank(g.Filesystem), fsRank(of.Filesystem)
	if r < 0 || ro < 0 || r > ro {
		out = append(out, "filesystem="+g.FS())
	}
	return out
}

// Resolve turns a grant list parsed from the command line into concrete grants against what
// the manifest declares: a bare "filesystem" becomes the declared level. It fails with
// ErrNotDeclared, naming the items, when the result is not a subset of declared.
func (g Grants) Resolve(declared Grants) (Grants, error) {
	// The MCP client capabilities are no manifest's to declare: kept as asked (whether the
	// plugin speaks MCP is the installer's check).
	declared.Sampling, declared.Elicitation = declared.Sampling || g.Sampling, declared.Elicitation || g.Elicitation
	if g.Filesystem == FilesystemDeclared {
		g.Filesystem = declared.FS()
		if g.Filesystem == FilesystemNone {
			return g, fmt.Errorf("%w: filesystem (the plugin declares filesystem = \"none\")", ErrNotDeclared)
		}
	}
	g.Filesystem = g.FS()
	if !g.Subset(declared) {
		return g, fmt.Errorf("%w: %s (declared: %s)", ErrNotDeclared,
			strings.Join(g.Missing(declared), ", "), declared.String())
	}
	return g, nil
}

// ErrGrantsNothing: an item that names a capability only to grant none of it
// (network=false, plugin.toml's `network = false`).
var ErrGrantsNothing = errors.New("grants nothing")

// ErrBadGrantList: a --grant list with an empty, padded or repeated item.
var ErrBadGrantList = errors.New("invalid capability list")

// ParseGrantList parses a --grant value such as "exec,store" or "metadata,filesystem=project".
// "" and "none" mean no capabilities. A bare "filesystem" means the declared level (see
// Resolve). Unknown items fail with ErrUnknownCapability naming the item; empty items
// ("exec,,store", a trailing comma), padded ones (" exec") and repeated ones ("exec,exec")
// fail with ErrBadGrantList naming it: a security decision is not guessed from a typo.
func ParseGrantList(s string) (Grants, error) {
	g := Grants{Filesystem: FilesystemNone}
	if s == "" || s == "none" {
		return g, nil
	}
	seen := map[string]bool{}
	lastSecret := -1
	for i, raw := range strings.Split(s, ",") {
		if lastSecret >= 0 && raw != "" && !strings.Contains(raw, "=") && strings.Contains(raw, ":") {
			// "secret=NAME@host:port,host:port": a bound secret's further destinations.
			n, dests, err := ParseSecretEntry(g.Secrets[lastSecret] + "," + raw)
			if err != nil {
				return Grants{}, err
			}
			g.Secrets[lastSecret] = SecretEntry(n, dests)
			continue
		}
		lastSecret = -1
		switch {
		case raw == "":
			return Grants{}, fmt.Errorf("%w: item %d is empty in %q", ErrBadGrantList, i+1, s)
		case strings.TrimSpace(raw) != raw:
			return Grants{}, fmt.Errorf("%w: %q has spaces around it", ErrBadGrantList, raw)
		}
		item := strings.ToLower(raw)
		name, _, _ := strings.Cut(item, "=")
		if name == "network" || name == "secret" {
			name = item // several destinations or secrets may be listed, each once
		}
		if seen[name] {
			return Grants{}, fmt.Errorf("%w: %q is given twice", ErrBadGrantList, raw)
		}
		seen[name] = true
		switch {
		case item == "exec":
			g.Exec = true
		case item == "store":
			g.Store = true
		case item == "metadata":
			g.Metadata = true
		case item == "network", item == "network=true":
			// network=true is plugin.toml's `network = true`: the whole network.
			g.Network = true
		case item == "network=false":
			return Grants{}, fmt.Errorf("%s %w: leave network out (revoking network takes the network away)", raw, ErrGrantsNothing)
		case strings.HasPrefix(item, "network="):
			d, err := egress.ParseDest(strings.TrimPrefix(item, "network="))
			if err != nil {
				return Grants{}, fmt.Errorf("%w: %w", ErrUnknownCapability, err)
			}
			if !slices.Contains(g.NetworkTo, d.String()) {
				g.NetworkTo = append(g.NetworkTo, d.String())
			}
		case strings.HasPrefix(item, "secret="):
			n, dests, err := ParseSecretEntry(raw[len("secret="):]) // names keep their case
			if err != nil {
				return Grants{}, err
			}
			if _, dup := secretFind(g.Secrets, n); dup {
				return Grants{}, fmt.Errorf("%w: secret %s is given twice", ErrBadGrantList, n)
			}
			g.Secrets = append(g.Secrets, SecretEntry(n, dests))
			lastSecret = len(g.Secrets) - 1
		case item == CapSampling:
			g.Sampling = true
		case item == CapElicitation:
			g.Elicitation = true
		case item == "filesystem":
			g.Filesystem = FilesystemDeclared
		case strings.HasPrefix(item, "filesystem="):
			level := strings.TrimPrefix(item, "filesystem=")
			if fsRank(level) < 0 || level == "" {
				return Grants{}, fmt.Errorf("%w: %q (filesystem is one of %s)", ErrUnknownCapability, item, FilesystemLevels)
			}
			g.Filesystem = level
		default:
			return Grants{}, fmt.Errorf("%w: %q (known: exec, store, metadata, network, filesystem, sampling, elicitation)", ErrUnknownCapability, item)
		}
	}
	return g, nil
}

// Describe says in a few words what each capability lets a plugin do (install prompts).
func Describe(item string) string {
	switch {
	case item == "exec":
		return "run shell commands (confined to the project and its own dir)"
	case item == "store":
		return "keep key/value data between runs"
	case item == "metadata":
		return "read project metadata: fledge.toml, git tags/status/log, filtered environment"
	case item == "network":
		return "the WHOLE network, every host and port, from the plugin and its commands (dangerous)"
	case strings.HasPrefix(item, "secret="):
		e := strings.TrimPrefix(item, "secret=")
		if d := SecretDests(e); len(d) > 0 {
			return "use the secret " + SecretName(e) + " with " + strings.Join(d, ", ") + " (granted with it): fledge puts the value into requests to them; the plugin and its commands hold only a placeholder"
		}
		return "receive the secret " + e + " in its own process (never its commands): its value will be readable by the plugin, which can keep or send it anywhere it may connect"
	case strings.HasPrefix(item, "network="):
		return "connect to " + strings.TrimPrefix(item, "network=") + " (and look the name up), from the plugin and its commands"
	case item == "filesystem=project":
		return "read the project's files"
	case item == "filesystem=project-rw":
		return "WRITE the project's files from the plugin process itself (strong: it can change any file of the project; git hooks, configs and the other protected paths stay read-only)"
	case item == "filesystem=plugin":
		return "use its private data dir only"
	case item == CapSampling:
		return "ask your MCP client's model for completions (sampling; MCP servers only)"
	case item == CapElicitation:
		return "ask you questions through your MCP client (elicitation; MCP servers only)"
	}
	return item
}

// Equal reports whether g and o grant the same (NetworkTo compared in order).
func (g Grants) Equal(o Grants) bool {
	if g.Exec != o.Exec || g.Store != o.Store || g.Metadata != o.Metadata || g.Network != o.Network || g.FS() != o.FS() ||
		g.Sampling != o.Sampling || g.Elicitation != o.Elicitation {
		return false
	}
	return slices.Equal(g.NetworkTo, o.NetworkTo) && slices.Equal(g.Secrets, o.Secrets)
}

// ValidSecretName reports whether n can name a secret: an environment variable name
// ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters) that is not one fledge sets itself.
func ValidSecretName(n string) bool {
	if n == "" || len(n) > 128 || strings.HasPrefix(strings.ToUpper(n), "FLEDGE_") {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	// Names that decide how programs load or start are never secrets: a plugin declaring
	// one would have the user's value change what its interpreter (or a loader, a shell, a
	// tool it starts) runs.
	u := strings.ToUpper(n)
	for _, p := range codeEnvPrefixes {
		if strings.HasPrefix(u, p) {
			return false
		}
	}
	return !slices.Contains(codeEnvNames, u)
}

// codeEnvPrefixes and codeEnvNames are the environment variables that make the dynamic
// loader, libc, an interpreter, a shell or a tool run code (or load it from a path) of the
// variable's choosing; none of them can name a secret.
var (
	codeEnvPrefixes = []string{
		"LD_", "DYLD_", "MALLOC_", "GLIBC_TUNABLES", // loaders and libc
		"PYTHON", "PERL", "RUBY", // every variable of these interpreters (PYTHONWARNINGS imports modules, PERL5DB runs code...)
		"LUA_INIT", "LUA_PATH", "LUA_CPATH", // LUA_INIT_5_4 and kin
		"GIT_CONFIG", // GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT/KEY_n/VALUE_n, GIT_CONFIG_GLOBAL...
		"CORECLR_", "COR_PROFILER", "BASH_FUNC_",
	}
	codeEnvNames = []string{
		"PATH", "HOME", "TMPDIR", "SHELL", "IFS", "ENV", "BASH_ENV", "PS1", "PS2", "PS3", "PS4",
		"PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "ZDOTDIR", "CDPATH",
		"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_OPTIONS", "CLASSPATH",
		"DOTNET_STARTUP_HOOKS", "DOTNET_ADDITIONAL_DEPS",
		"PHPRC", "PHP_INI_SCAN_DIR", "TCLLIBPATH", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER",
		"GOFLAGS", "GOENV", "GOTOOLCHAIN",
		"GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
		"GIT_PAGER", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_TEMPLATE_DIR",
		"EDITOR", "VISUAL", "PAGER", "MANPAGER", "BROWSER", "SSH_ASKPASS", "SUDO_ASKPASS", "LESSOPEN", "LESSCLOSE",
		"OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
		"GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES",
	}
)

// ParseGrantName is the one parser of a single capability name, in either spelling fledge
// meets: "filesystem=<level>" (the CLI, plugins.toml, audit records) and
// "filesystem:<level>" (how runtime-v1 handshakes carry it, WireName). Errors as
// ParseGrantList's.
func ParseGrantName(name string) (Grants, error) {
	if level, ok := strings.CutPrefix(name, "filesystem:"); ok {
		name = "filesystem=" + level
	}
	return parseSingle(name)
}

// parseSingle parses exactly one capability in the "filesystem=<level>" spelling.
func parseSingle(name string) (Grants, error) {
	if name == "" || name == "none" || strings.Contains(name, ",") {
		return Grants{}, fmt.Errorf("%w: %q (name one of exec, store, metadata, network, filesystem[=none|plugin|project|project-rw], sampling, elicitation)", ErrUnknownCapability, name)
	}
	return ParseGrantList(name)
}

// WireName spells one of Names the way runtime-v1 handshakes carry it ("filesystem:<level>").
func WireName(name string) string {
	if level, ok := strings.CutPrefix(name, "filesystem="); ok {
		return "filesystem:" + level
	}
	return name
}

// Union is every capability granted by g or h (the higher filesystem level).
func (g Grants) Union(h Grants) Grants {
	u := Grants{Exec: g.Exec || h.Exec, Store: g.Store || h.Store, Metadata: g.Metadata || h.Metadata,
		Network: g.Network || h.Network, Filesystem: g.FS(), Sampling: g.Sampling || h.Sampling, Elicitation: g.Elicitation || h.Elicitation}
	for _, d := range append(append([]string{}, g.NetworkTo...), h.NetworkTo...) {
		if !slices.Contains(u.NetworkTo, d) {
			u.NetworkTo = append(u.NetworkTo, d)
		}
	}
	for _, n := range append(append([]string{}, g.Secrets...), h.Secrets...) {
		if !slices.Contains(u.Secrets, n) {
			u.Secrets = append(u.Secrets, n)
		}
	}
	if fsRank(h.FS()) > fsRank(u.Filesystem) {
		u.Filesystem = h.FS()
	}
	return u
}
