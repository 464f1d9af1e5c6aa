// SPDX-License-Identifier: MIT

package policy

import (
	"path/filepath"
	"sort"
	"strings"
)

// A language version manager (pyenv, rbenv, asdf, mise, nvm, volta) puts a shim dir or a
// version's bin dir on PATH; what runs from there lives elsewhere in the manager's install
// tree (pyenv's shim execs ~/.pyenv/libexec/pyenv, which picks ~/.pyenv/versions/X/bin/python).
// Granting only the PATH entry breaks every `#!/usr/bin/env python3` plugin of a developer
// whose python3 comes from one. The install tree holds interpreters and the manager's own
// scripts, no secrets, so it is granted read+execute, found from the PATH entry (never all of
// $HOME, never a sensitive subtree), plus the few version files the manager reads outside it.

// VersionManager is one manager found from a PATH entry.
type VersionManager struct {
	Name      string `json:"name"`       // pyenv, rbenv, asdf, mise, nvm, volta
	PATHEntry string `json:"path_entry"` // the PATH entry it was found from
	Root      string `json:"root"`       // its install tree: read+execute
	// ReadExec are executables outside Root its shims run (mise's shims are symlinks to the
	// mise binary).
	ReadExec []string `json:"read_exec,omitempty"`
	// ReadOnly are existing files outside Root it reads to pick a version: its global
	// version file (~/.tool-versions). Never a config that can hold secrets (~/.config/mise).
	ReadOnly []string `json:"read_only,omitempty"`
	// Env are the variables it reads (names, or PREFIX_* patterns), passed through (the
	// credential filter still applies).
	Env []string `json:"env,omitempty"`
	// VersionFiles are the file names it looks for in the working directory and its parents.
	VersionFiles []string `json:"version_files,omitempty"`
}

// Lookup is what detection asks of the filesystem (policy makes no OS calls itself; core
// passes the real one, tests a fake tree).
type Lookup interface {
	// Exists: path exists (not following a final symlink).
	Exists(path string) bool
	// RegularFile: path is a regular file (not a symlink).
	RegularFile(path string) bool
	// Resolve returns path with symlinks resolved ("" if it does not exist).
	Resolve(path string) string
	// FirstEntry is the name of some entry of dir ("" if none or unreadable).
	FirstEntry(dir string) string
}

// maxManagerDepth bounds how far above a PATH entry a manager's root is looked for
// (~/.nvm/versions/node/v20/bin is four levels below its root).
const maxManagerDepth = 5

// DetectVersionManagers finds the managers behind the user's PATH entries. home bounds the
// search: $HOME itself, its ancestors and its sensitive subtrees never become a root.
func DetectVersionManagers(path []string, home string, l Lookup) []VersionManager {
	var out []VersionManager
	seen := map[string]bool{}
	for _, e := range path {
		if e == "" || !filepath.IsAbs(e) {
			continue
		}
		e = filepath.Clean(e)
		a := e
		for depth := 0; depth <= maxManagerDepth && a != "/" && !(home != "" && Within(home, a)); depth++ {
			if vm, ok := managerAt(a, e, home, l); ok {
				if !seen[vm.Name+"\x00"+vm.Root] {
					seen[vm.Name+"\x00"+vm.Root] = true
					out = append(out, vm)
				}
				break
			}
			a = filepath.Dir(a)
		}
	}
	return out
}

// managerAt reports whether dir is the root of a version manager that entry (inside it)
// belongs to.
func managerAt(dir, entry, home string, l Lookup) (VersionManager, bool) {
	rel, _ := filepath.Rel(dir, entry)
	in := func(names ...string) bool {
		for _, n := range names {
			if rel == n {
				return true
			}
		}
		return false
	}
	j := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	homeFile := func(p string) string {
		if home == "" {
			return ""
		}
		return filepath.Join(home, p)
	}
	vm := VersionManager{PATHEntry: entry, Root: dir}
	switch {
	case l.Exists(j("libexec", "pyenv")):
		vm.Name, vm.Env, vm.VersionFiles = "pyenv", []string{"PYENV_VERSION", "PYENV_ROOT", "PYENV_DIR"}, []string{".python-version"}
	case l.Exists(j("libexec", "rbenv")):
		vm.Name, vm.Env, vm.VersionFiles = "rbenv", []string{"RBENV_VERSION", "RBENV_ROOT", "RBENV_DIR"}, []string{".ruby-version"}
	case l.Exists(j("nvm.sh")) && strings.HasPrefix(rel, "versions"+string(filepath.Separator)):
		vm.Name, vm.Env, vm.VersionFiles = "nvm", []string{"NVM_DIR", "NVM_BIN", "NVM_INC"}, []string{".nvmrc"}
	case (l.Exists(j("bin", "volta-shim")) || l.Exists(j("bin", "volta"))) && l.Exists(j("tools")) && in("bin"):
		vm.Name, vm.Env = "volta", []string{"VOLTA_HOME"}
	case l.Exists(j("installs")) && (filepath.Base(dir) == "mise" || filepath.Base(resolveShim(dir, l)) == "mise"):
		vm.Name, vm.Env, vm.VersionFiles = "mise", []string{"MISE_*"}, []string{".tool-versions", "mise.toml", ".mise.toml"}
		if bin := resolveShim(dir, l); bin != "" && filepath.Base(bin) == "mise" && !Within(bin, dir) {
			vm.ReadExec = append(vm.ReadExec, bin)
		}
		// Not ~/.config/mise: its [env] section is where mise users keep secrets.
		vm.ReadOnly = appendExisting(vm.ReadOnly, l, homeFile(".tool-versions"))
	case l.Exists(j("installs")) && (l.Exists(j("asdf.sh")) || l.Exists(j("plugins"))) && in("shims", "bin"):
		vm.Name, vm.Env, vm.VersionFiles = "asdf", []string{"ASDF_*"}, []string{".tool-versions"}
		vm.ReadOnly = appendExisting(vm.ReadOnly, l, homeFile(".tool-versions"), homeFile(".asdfrc"))
	default:
		return vm, false
	}
	return vm, true
}

// resolveShim is where one of dir/shims's entries leads (mise's shims are symlinks to mise).
func resolveShim(dir string, l Lookup) string {
	shims := filepath.Join(dir, "shims")
	name := l.FirstEntry(shims)
	if name == "" {
		return ""
	}
	return l.Resolve(filepath.Join(shims, name))
}

func appendExisting(list []string, l Lookup, paths ...string) []string {
	for _, p := range paths {
		if p != "" && l.Exists(p) {
			list = append(list, p)
		}
	}
	return list
}

// versionFilesAbove are the version files the managers read that exist as regular files in
// dir and its parents (pyenv reads .python-version from the working directory up to /).
func versionFilesAbove(dir string, vms []VersionManager, l Lookup) []string {
	if dir == "" || l == nil {
		return nil
	}
	names := map[string]bool{}
	for _, vm := range vms {
		for _, n := range vm.VersionFiles {
			names[n] = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		for _, n := range sorted {
			if f := filepath.Join(d, n); l.RegularFile(f) {
				out = append(out, f)
			}
		}
		if d == "/" || d == "." {
			return out
		}
	}
}

// safeGrant reports whether a manager path may be granted: absolute, not "/", not $HOME or
// an ancestor of it, not inside or around a sensitive part of $HOME, not overlapping a Deny
// path. PATH entries (usablePATH) go through it too.
func safeGrant(p, home string, deny []string) bool {
	if p == "" || !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return false
	}
	p = filepath.Clean(p)
	if p == "/" {
		return false
	}
	if home != "" {
		home = filepath.Clean(home)
		if Within(home, p) {
			return false
		}
		for _, s := range sensitiveHome {
			sp := filepath.Join(home, s)
			if Within(p, sp) || Within(sp, p) {
				return false
			}
		}
	}
	for _, d := range deny {
		if Within(p, d) || Within(d, p) {
			return false
		}
	}
	return true
}

// managerAccess is what the detected managers add to a profile: their trees and
// executables read+execute, their config and the version files above dir read-only.
func managerAccess(p Paths, deny []string) (readExec, readOnly []string) {
	covered := func(x string, lists ...[]string) bool {
		for _, list := range lists {
			for _, s := range list {
				if Within(x, s) {
					return true
				}
			}
		}
		return false
	}
	for _, vm := range p.VersionManagers {
		for _, x := range append([]string{vm.Root}, vm.ReadExec...) {
			if safeGrant(x, p.Home, deny) && !covered(x, SystemPaths, readExec) {
				readExec = append(readExec, filepath.Clean(x))
			}
		}
		for _, x := range vm.ReadOnly {
			if safeGrant(x, p.Home, deny) && !covered(x, SystemPaths, readExec, readOnly) {
				readOnly = append(readOnly, filepath.Clean(x))
			}
		}
	}
	for _, f := range p.VersionFiles {
		if safeGrant(f, p.Home, deny) && !covered(f, readExec, readOnly) {
			readOnly = append(readOnly, f)
		}
	}
	return readExec, readOnly
}

// VersionFilesFor lists the version files the given managers read that exist in dir and
// its parents (for Paths.VersionFiles).
func VersionFilesFor(dir string, vms []VersionManager, l Lookup) []string {
	return versionFilesAbove(dir, vms, l)
}

// managerEnv are the variables the detected managers read.
func managerEnv(p Paths) []string {
	var out []string
	for _, vm := range p.VersionManagers {
		out = append(out, vm.Env...)
	}
	return out
}

// toolchainReadOnly are the policy read_only entries that hold a PATH entry: a toolchain
// tree the user granted for its interpreters (README: read_only = ["~/.pyenv"]). They are
// read+execute, and the plugin process gets them too: its own interpreter is found on PATH.
func toolchainReadOnly(p Paths, c *Config, deny []string) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, ro := range safeExtra(c.Sandbox.ReadOnly, deny) {
		for _, e := range p.UserPATH {
			if e != "" && filepath.IsAbs(e) && Within(filepath.Clean(e), ro) {
				out = append(out, ro)
				break
			}
		}
	}
	return out
}
