// SPDX-License-Identifier: MIT

package policy

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/egress"

	"github.com/fledgehq/fledge/sandbox"
)

// SystemPaths are granted read+execute to every confined process. Some do not exist on a
// given machine (/lib32, /nix/store): the sandbox skips missing paths instead of failing.
var SystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/nix/store"}

// DeviceReadWrite and ProcReadOnly are the bits of /dev and /proc ordinary commands need
// (redirects to /dev/null, random numbers, /proc/self). Access to other processes' /proc
// entries is still bounded by Landlock's ptrace scoping.
var (
	DeviceReadWrite = []string{"/dev/null", "/dev/zero", "/dev/full"}
	DeviceReadOnly  = []string{"/dev/urandom", "/dev/random"}
	ProcReadOnly    = []string{"/proc"}
)

// sensitiveHome are subtrees of $HOME that never become PATH grants, even if the user put
// a bin dir there: they hold keys and tokens.
var sensitiveHome = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".config/gh",
	".password-store", ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".local/share/keyrings",
	".vault-token", ".terraform.d", ".config/git/credentials",
}

// Paths locates what a profile is computed from. All absolute; ProjectRoot "" means no
// project. Callers pass paths with symlinks already resolved (the sandbox opens each path
// once, so a symlinked PATH entry would otherwise grant its target).
type Paths struct {
	ProjectRoot   string
	PluginDir     string // <config>/plugins/<name>
	PluginDataDir string // <config>/plugins/<name>/data
	ConfigDir     string
	StateDir      string
	AuditLog      string // optional; denied when it lives outside StateDir
	// PluginDirEntries are the top-level names in PluginDir (listed by the caller; policy
	// makes no OS calls). When set, the plugin dir is allowed entry by entry, leaving out
	// state.json (and its moved-aside copies) and data/: the host's storage file is then
	// out of reach, not merely read-only. Nil allows the whole dir read+execute.
	PluginDirEntries []string
	UserPATH         []string
	Home             string
	// VersionManagers are the language version managers behind UserPATH entries
	// (DetectVersionManagers): their install trees are granted read+execute.
	VersionManagers []VersionManager
	// VersionFiles are the managers' version files (.python-version, ...) that exist in
	// the plugin's working directory and its parents (VersionFilesFor): read-only.
	VersionFiles []string
}

// Deny rule (how every profile encodes "never the fledge config or state dirs"):
//
// Deny holds ConfigDir, StateDir, the audit log and the files fledge keeps beside it. No allow entry may be equal to or an
// ancestor of a Deny path (the Linux sandbox refuses such a Spec, since Landlock cannot
// subtract). An allow entry strictly INSIDE a Deny path is an explicit carve-out and is
// permitted: the plugin's own dir and data dir live in <config>/plugins/<name>, and granting
// them does not reach plugins.toml, config.toml or any other plugin's dir, because nothing
// grants their common parent. CheckAccess verifies exactly this rule; Seatbelt profiles
// express it as deny rules followed by the carve-out allows.
func denyList(p Paths) []string {
	var d []string
	paths := []string{p.ConfigDir, p.StateDir, p.AuditLog}
	if p.AuditLog != "" {
		// Outside the state dir the files beside the log are not covered by it.
		paths = append(paths, audit.Sidecars(filepath.Clean(p.AuditLog))...)
	}
	for _, x := range paths {
		if x == "" {
			continue
		}
		x = filepath.Clean(x)
		dup := false
		for _, y := range d {
			if Within(x, y) {
				dup = true
			}
		}
		if !dup {
			d = append(d, x)
		}
	}
	return d
}

// CheckAccess enforces the Deny rule: an error names the first allow entry that equals or
// contains a Deny path.
func CheckAccess(a sandbox.Access) error {
	for _, group := range []struct {
		kind  string
		paths []string
	}{{"read-write", a.ReadWrite}, {"read-only", a.ReadOnly}, {"read-exec", a.ReadExec}} {
		for _, allow := range group.paths {
			for _, deny := range a.Deny {
				if Within(deny, allow) {
					return fmt.Errorf("%w: %s entry %s covers denied path %s", sandbox.ErrInvalidSpec, group.kind, allow, deny)
				}
			}
		}
	}
	return nil
}

// usablePATH filters the user's PATH entries down to those safe to grant read+execute
// (safeGrant, the one rule for PATH entries and version managers' trees) and not already
// covered by a system path.
func usablePATH(p Paths, deny []string) []string {
	var out []string
next:
	for _, e := range p.UserPATH {
		if !safeGrant(e, p.Home, deny) {
			continue
		}
		e = filepath.Clean(e)
		for _, covered := range [][]string{SystemPaths, out} {
			for _, s := range covered {
				if Within(e, s) {
					continue next
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// safeExtra drops policy paths that would break the Deny rule; config loading already
// refuses ones overlapping the config dir, this also covers the state dir and audit log.
func safeExtra(paths, deny []string) []string {
	var out []string
next:
	for _, x := range paths {
		for _, d := range deny {
			if Within(d, x) {
				continue next
			}
		}
		out = append(out, filepath.Clean(x))
	}
	return out
}

func baseAccess(p Paths) (sandbox.Access, []string) {
	deny := denyList(p)
	mgrExec, mgrRead := managerAccess(p, deny)
	a := sandbox.Access{
		ReadExec: append(append(append([]string{}, SystemPaths...), usablePATH(p, deny)...), mgrExec...),
		ReadOnly: append(append(append([]string{"/etc"}, DeviceReadOnly...), ProcReadOnly...), mgrRead...),
		// ReadWrite starts with the devices commands write to.
		ReadWrite: append([]string{}, DeviceReadWrite...),
		Deny:      deny,
	}
	return a, deny
}

// pluginDirRules is how the plugin dir is allowed: entry by entry without the host's
// state file when the entries are known, else the whole dir.
func pluginDirRules(p Paths) []string {
	if p.PluginDir == "" {
		return nil
	}
	if p.PluginDirEntries == nil {
		return []string{filepath.Clean(p.PluginDir)}
	}
	var out []string
	for _, name := range p.PluginDirEntries {
		if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') ||
			strings.HasPrefix(name, StateFileName) || name == DataDirName {
			continue
		}
		out = append(out, filepath.Join(p.PluginDir, name))
	}
	return out
}

// StateFileName and DataDirName are the host-owned names inside a plugin dir.
const (
	StateFileName = "state.json"
	DataDirName   = "data"
)

func addIf(list []string, path string) []string {
	if path == "" {
		return list
	}
	return append(list, filepath.Clean(path))
}

// ExecAccess is the profile of a command a plugin asked fledge to run: read-write on the
// project root, the plugin's data dir and policy read_write; read+execute on system paths,
// safe PATH entries and the plugin dir (read-only: it holds state.json, which only the host
// writes; execute so commands can run the plugin's helper scripts); read-only on /etc and
// policy read_only; never the config or state dirs (see the Deny rule above).
func ExecAccess(p Paths, c *Config) sandbox.Access {
	a, deny := baseAccess(p)
	a.ReadWrite = addIf(a.ReadWrite, p.ProjectRoot)
	a.ReadWrite = addIf(a.ReadWrite, p.PluginDataDir)
	a.ReadExec = append(a.ReadExec, pluginDirRules(p)...)
	if c != nil {
		a.ReadWrite = append(a.ReadWrite, safeExtra(c.Sandbox.ReadWrite, deny)...)
		tool := toolchainReadOnly(p, c, deny)
		for _, ro := range safeExtra(c.Sandbox.ReadOnly, deny) {
			if !hasPath(tool, ro) {
				a.ReadOnly = append(a.ReadOnly, ro)
			}
		}
		// A toolchain tree runs its interpreters: read+execute (read-only alone ends in
		// "bad interpreter").
		a.ReadExec = append(a.ReadExec, tool...)
		a.Unprotect = unprotect(c)
	}
	return a
}

func hasPath(list []string, x string) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

// unprotect is policy's opt-out from the sandbox's default protected paths. Protected
// itself stays nil: the sandbox works the set out at every launch from what is on disk
// (a worktree or submodule an earlier command added is covered by the next one), which a
// list fixed when the profile is built could not do.
func unprotect(c *Config) []string {
	if c == nil || len(c.Sandbox.Unprotect) == 0 {
		return nil
	}
	return append([]string{}, c.Sandbox.Unprotect...)
}

// PluginAccess is the profile of the plugin process itself: read+execute on system paths,
// safe PATH entries and its own dir (it cannot rewrite its code or plant files there);
// read-write on its private data dir; the project only per the filesystem grant (none: no
// access; project: read-only; project-rw: read-write, its protected paths read-only as for
// commands, since the sandbox protects every writable root alike; plugin: nothing beyond
// the data dir). Policy read_only and
// read_write do not apply (a plugin gets what its grants say), except a read_only toolchain
// tree that holds a PATH entry, where the plugin's interpreter lives.
func PluginAccess(p Paths, g Grants, c *Config) sandbox.Access {
	a, deny := baseAccess(p)
	a.ReadExec = append(a.ReadExec, pluginDirRules(p)...)
	// The one policy extra a plugin gets: a read_only toolchain tree holding a PATH entry,
	// since its own interpreter (#!/usr/bin/env python3) is found there.
	a.ReadExec = append(a.ReadExec, toolchainReadOnly(p, c, deny)...)
	a.ReadWrite = addIf(a.ReadWrite, p.PluginDataDir)
	a.Unprotect = unprotect(c)
	switch {
	case g.WritesProject():
		a.ReadWrite = addIf(a.ReadWrite, p.ProjectRoot)
	case g.ReadsProject():
		a.ReadOnly = addIf(a.ReadOnly, p.ProjectRoot)
	}
	return a
}

// GitAccess is the profile of fledge's own git calls on the project (init's git info,
// metadata answers): system paths and /etc to run git, the project read-only, nothing
// writable but the harmless devices; no plugin dir, no policy extras.
func GitAccess(p Paths) sandbox.Access {
	a, _ := baseAccess(p)
	a.ReadOnly = addIf(a.ReadOnly, p.ProjectRoot)
	return a
}

// LegacyAccess is the profile of a legacy (non-protocol) plugin run as a whole program under
// legacy = "confined": read-write on the project and its data dir, read+execute on system
// paths, PATH entries and its own dir, policy extras as for exec.
func LegacyAccess(p Paths, c *Config) sandbox.Access {
	return ExecAccess(p, c)
}

// DefaultNoFile is RLIMIT_NOFILE for confined processes.
const DefaultNoFile = 1024

// DefaultKillGrace is the time between SIGTERM and SIGKILL.
const DefaultKillGrace = 2 * time.Second

// ExecLimits are the limits of one exec; Timeout is timeout_default (use ExecTimeout for a
// plugin-requested value).
func (c *Config) ExecLimits() sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes: c.Sandbox.Memory,
		Pids:        c.Sandbox.Pids,
		CPU:         c.Sandbox.CPU,
		NoFile:      DefaultNoFile,
		Timeout:     c.Sandbox.TimeoutDefault,
		KillGrace:   DefaultKillGrace,
	}
}

// PluginLimits are the limits of a plugin process: the same resource bounds as an exec, but
// no timeout (a plugin may legitimately wait minutes for a prompt; cancel ends it).
func (c *Config) PluginLimits() sandbox.Limits {
	l := c.ExecLimits()
	l.Timeout = 0
	return l
}

// PluginNetwork reports whether the plugin process (and so each command it runs) gets the
// whole network: with network = true granted, unless policy denies networking altogether,
// or with the user's network = "allow" override.
func (c *Config) PluginNetwork(g Grants) bool {
	return c.NetworkAllowed() || g.Network && c.Sandbox.Network != NetworkDeny
}

// Egress is the network by destination of one plugin session (shared by the plugin process
// and its commands), or nil: no list granted, the whole network, or networking denied.
func (c *Config) Egress(g Grants) *egress.Session {
	entries := g.EgressEntries()
	if c.PluginNetwork(g) || c.Sandbox.Network == NetworkDeny || len(entries) == 0 {
		return nil
	}
	p, err := egress.NewPolicy(false, entries)
	if err != nil {
		return nil // validated at install and grant; a bad entry here opens nothing
	}
	return egress.NewSession(p, egress.Limits{})
}

// HookEgress is the network by destination of one install hook that may reach only dests
// (an npm package's install scripts: the registry), or nil when policy denies networking or
// dests is empty or invalid (the hook then gets no network at all).
func (c *Config) HookEgress(dests []string) *egress.Session {
	if c.Sandbox.Network == NetworkDeny || len(dests) == 0 {
		return nil
	}
	p, err := egress.NewPolicy(false, dests)
	if err != nil {
		return nil
	}
	return egress.NewSession(p, egress.Limits{})
}

// NetworkText says in words what network a plugin (and each command it runs) gets with
// grants g under this policy (plugins info, doctor).
func (c *Config) NetworkText(g Grants) string {
	switch {
	case c.NetworkAllowed():
		return `everything ([sandbox] network = "allow" overrides the grant)`
	case c.Sandbox.Network == NetworkDeny:
		return `none ([sandbox] network = "deny")`
	case g.Network:
		if len(g.Secrets) > 0 && len(g.EgressEntries()) > len(g.NetworkTo) {
			return "everything (network = true granted: a bound secret's placeholder is never replaced there)"
		}
		return "everything (network = true granted)"
	case len(g.EgressEntries()) > 0:
		return "only " + strings.Join(g.EgressEntries(), ", ")
	}
	return "none (its own loopback only)"
}
