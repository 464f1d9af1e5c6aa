// SPDX-License-Identifier: MIT

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

// ProtectableNames are the last path elements of the default protected set outside the
// top level of a git directory: the .git file of a worktree or submodule, and a hooks
// directory (core.hooksPath names one). Inside a git directory every entry git does not
// write in ordinary work (GitWrites) is protected, whatever its name.
var ProtectableNames = []string{".git", "hooks", "config", "config.worktree", "commondir"}

// ProtectedFiles are files of fledge's own protected by name wherever the default
// protection looks (each writable root and the directories the scan visits beneath it),
// read-only in every view and never removed or renamed away: fledge.lock, whose content
// `fledge plugins sync` installs and grants, so a plugin or command that could rewrite it
// would grant itself more at the next sync. A missing one is not created.
var ProtectedFiles = []string{"fledge.lock"}

// GitWrites reports whether git writes the top-level entry name of a git directory in
// ordinary work (commit, merge, rebase, cherry-pick, revert, stash, fetch, pull, gc,
// bisect, notes, worktree add, lfs): those stay writable under the default protection,
// every other entry is read-only. Nothing in one of them names code for git to run.
func GitWrites(name string) bool {
	switch name {
	case "objects", "refs", "logs", "reftable", "packed-refs", "index", "shallow",
		"COMMIT_EDITMSG", "MERGE_MSG", "MERGE_MODE", "MERGE_RR", "MERGE_AUTOSTASH", "SQUASH_MSG",
		"TAG_EDITMSG", "NOTES_EDITMSG", "EDIT_DESCRIPTION", "NOTES_MERGE_PARTIAL", "NOTES_MERGE_REF",
		"NOTES_MERGE_WORKTREE", "rebase-merge", "rebase-apply", "sequencer", "rr-cache",
		"gc.pid", "gc.log", "lfs", "worktrees", "locked", "fsmonitor--daemon.ipc", "gitk.cache":
		return true
	}
	// HEAD, AUTO_MERGE, ORIG_HEAD, FETCH_HEAD, MERGE_HEAD, CHERRY_PICK_HEAD, REVERT_HEAD,
	// REBASE_HEAD...; BISECT_LOG, BISECT_START...; index.lock, HEAD.lock and every other
	// lock file; split-index shared indexes.
	return name == "HEAD" || name == "AUTO_MERGE" || strings.HasSuffix(name, "_HEAD") ||
		strings.HasPrefix(name, "BISECT_") || strings.HasSuffix(name, ".lock") ||
		strings.HasPrefix(name, "sharedindex.")
}

// ValidUnprotect checks one Unprotect entry: UnprotectHooksPath, UnprotectIncludes, or a
// relative, clean, slash-separated path (a "*" matches within one element, as in
// path.Match) whose last element is one of ProtectableNames or "*", or lies in a git
// directory (an element before it is .git or ends in .git) and is not one git writes.
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
	els := strings.Split(name, "/")
	for _, el := range els {
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
	if GitWrites(last) {
		return bad("git writes it in ordinary work, so fledge never protects it")
	}
	for _, el := range els[:len(els)-1] {
		if strings.HasSuffix(el, ".git") {
			return nil // an entry of a git directory
		}
	}
	return bad(fmt.Sprintf("fledge never protects it (protected paths end in %s or are entries of a git directory; %q and %q name the places those settings point at)",
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
