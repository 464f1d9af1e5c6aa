// SPDX-License-Identifier: MIT

package safefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// fallbackTmp is where private temp dirs go when the user's TMPDIR is not safe to use.
const fallbackTmp = "/tmp"

// TempParent is the directory a private temp dir for a run with these writable roots is
// made in: os.TempDir(), unless a directory on its path lies strictly inside one of the
// roots (a TMPDIR=$PWD/.tmp in the project). There a command could replace that
// directory with a symlink, and fledge would make the run's temp dir, and grant it
// read-write, wherever the link points. Then /tmp; an error when that is unsafe too. Both
// the path as written and where each prefix resolves to are checked. A root itself is not
// a concern: a command cannot replace the directory it was granted.
func TempParent(writable []string) (string, error) {
	roots := make([]string, 0, 2*len(writable))
	for _, w := range writable {
		w = filepath.Clean(w)
		roots = append(roots, w)
		if r, err := filepath.EvalSymlinks(w); err == nil && r != w {
			roots = append(roots, r)
		}
	}
	for _, tmp := range []string{os.TempDir(), fallbackTmp} {
		if inWritable(filepath.Clean(tmp), roots) == "" {
			return tmp, nil
		}
	}
	return "", fmt.Errorf("%w: the temp dir %s lies in %s, which sandboxed commands can write",
		ErrUnsafePath, os.TempDir(), inWritable(filepath.Clean(os.TempDir()), roots))
}

// inWritable returns the root that p or a prefix of p (as written, or resolved) lies
// strictly inside, or "".
func inWritable(p string, roots []string) string {
	for q := p; ; q = filepath.Dir(q) {
		cands := []string{q}
		if r, err := filepath.EvalSymlinks(q); err == nil && r != q {
			cands = append(cands, r)
		}
		for _, c := range cands {
			for _, root := range roots {
				if strings.HasPrefix(c, root+string(filepath.Separator)) || (root == "/" && c != "/") {
					return root
				}
			}
		}
		if q == filepath.Dir(q) {
			return ""
		}
	}
}
