package sandbox

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrUnprotect wraps an Unprotect entry that cannot name anything of the default protected
// set (absolute, "..", not a path, or a name fledge never protects).
var ErrUnprotect = errors.New("invalid unprotect entry")

// UnprotectIncludes is the Unprotect entry that opts out of protecting the files a
// repository's config includes (include.path, includeIf.*.path) when they lie in a
// writable root.
const UnprotectIncludes = "include.path"

// UnprotectHooksPath is the Unprotect entry that opts out of protecting the directory a
// repository's core.hooksPath names (husky's .husky/_, a .githooks dir): its place is
// whatever the config says, so it is named by the setting, not by a path.
const UnprotectHooksPath = "core.hooksPath"

// ProtectableNames are the last path elements the default protected set is made of: the
// .git file of a worktree or submodule, a git directory's hooks, config, config.worktree,
// and a linked worktree's commondir (which says where its hooks and config are).
var ProtectableNames = []string{".git", "hooks", "config", "config.worktree", "commondir"}

// ValidUnprotect checks one Unprotect entry: UnprotectHooksPath, UnprotectIncludes, or a relative, clean,
// slash-separated path (a "*" matches within one element, as in path.Match) whose last
// element is one of ProtectableNames or "*".
func ValidUnprotect(name string) error {
	if name == UnprotectHooksPath || name == UnprotectIncludes {
		return nil
	}
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrUnprotect, name, why) }
	switch {
	case name == "":
		return bad("empty")
	case strings.HasPrefix(name, "/") || strings.HasPrefix(name, "~"):
		return bad("expected a path relative to a writable root, like \".git/config\"")
	case strings.ContainsRune(name, '\\'):
		return bad("use / between path elements")
	}
	for _, el := range strings.Split(name, "/") {
		switch el {
		case "..":
			return bad("\"..\" would leave the writable root")
		case "", ".":
			return bad("not a clean path (empty or \".\" element)")
		}
	}
	if _, err := path.Match(name, ""); err != nil {
		return bad("bad pattern: " + err.Error())
	}
	last := path.Base(name)
	if last == "*" {
		return nil
	}
	for _, n := range ProtectableNames {
		if last == n {
			return nil
		}
	}
	return bad(fmt.Sprintf("fledge never protects it (protected paths end in %s; %q and %q name the places those settings point at)",
		strings.Join(ProtectableNames, ", "), UnprotectHooksPath, UnprotectIncludes))
}

// Unprotected reports whether rel (a protected path relative to a writable root, with /)
// is named by one of the Unprotect entries.
func Unprotected(rel string, entries []string) bool {
	for _, e := range entries {
		if e == UnprotectHooksPath || e == UnprotectIncludes {
			continue
		}
		if ok, _ := path.Match(e, rel); ok {
			return true
		}
	}
	return false
}

// UnprotectsSetting reports whether entries hold the setting token (UnprotectHooksPath or
// UnprotectIncludes).
func UnprotectsSetting(entries []string, token string) bool {
	for _, e := range entries {
		if e == token {
			return true
		}
	}
	return false
}
