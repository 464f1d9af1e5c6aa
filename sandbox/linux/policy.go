// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/sandbox"
)

// SystemReadExec are the system paths a command needs read+execute on. Callers add them
// (with the user's PATH entries) to Access.ReadExec; missing ones are skipped.
var SystemReadExec = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// deepPath is the depth (slashes) from which asking symlinkFree first saves lookups.
const deepPath = 3

// within reports whether p equals root or lies beneath it (both clean and absolute).
func within(p, root string) bool {
	if p == root || root == "/" {
		return true
	}
	return strings.HasPrefix(p, root+"/")
}

// forms returns the lexical form of p and, when it differs, its symlink-resolved form:
// Landlock resolves rules when they are added, so both must be checked.
//
// A path with no symlink anywhere on it resolves to itself. EvalSymlinks takes an lstat per
// component to find that out (a run's twenty-odd paths, several of them seven to nine
// components deep, were about 80 system calls on every exec); a kernel lookup that refuses
// every symlink says it in two (symlinkFree), so deep paths ask that first.
func forms(p string) []string {
	c := filepath.Clean(p)
	out := []string{c}
	if strings.Count(c, "/") >= deepPath && symlinkFree(c) {
		return out
	}
	if r, err := filepath.EvalSymlinks(c); err == nil && r != c {
		out = append(out, r)
	}
	return out
}

// checkAccess refuses a spec whose allow-list is not absolute or covers a Deny path:
// Landlock can only add access, never subtract it beneath an allowed directory. An allow
// entry inside a denied tree (a plugin's own dir under the config dir) is an explicit carve
// out and fine.
func checkAccess(a *sandbox.Access, extra ...string) error {
	allow := make([]string, 0, len(a.ReadWrite)+len(a.ReadOnly)+len(a.ReadExec)+len(extra))
	seen := make(map[string]bool, cap(allow))
	for _, l := range [][]string{a.ReadWrite, a.ReadOnly, a.ReadExec, extra} {
		for _, p := range l {
			// Each path once: the implicit paths are often granted by the spec too.
			if !seen[p] {
				seen[p] = true
				allow = append(allow, p)
			}
		}
	}
	for _, p := range append(append([]string{}, allow...), a.Deny...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: path %q is not absolute", sandbox.ErrInvalidSpec, p)
		}
	}
	if len(a.Deny) == 0 {
		return nil
	}
	// Each allowed path's forms once (resolving symlinks is a stat per component), not
	// once per denied path.
	allowForms := make([][]string, len(allow))
	for i, p := range allow {
		allowForms[i] = forms(p)
	}
	for _, d := range a.Deny {
		for _, df := range forms(d) {
			for i, p := range allow {
				for _, pf := range allowForms[i] {
					if within(df, pf) {
						return fmt.Errorf("%w: allowed path %q covers denied path %q", sandbox.ErrInvalidSpec, p, d)
					}
				}
			}
		}
	}
	return nil
}
