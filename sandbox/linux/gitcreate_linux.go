// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"

	"github.com/fledgehq/fledge/internal/safefs"
)

// The git protector creates a missing hooks directory, config or config.worktree in a
// writable root before it protects them. A command of the same plugin may be running and
// can swap any directory on the way for a symlink between the protector's look and the
// create (rename a fresh sub/.git aside and link /etc in its place), so the create goes
// through safefs beneath the writable root: it never follows a symlink, and fledge (often
// root) never makes /etc/hooks or /etc/config.

// beneath splits p into the outermost writable root holding it and the path below it.
func (g *gitProtector) beneath(p string) (root, rel string, err error) {
	for _, r := range g.roots {
		if rel, ok := under(r.real, p); ok {
			return r.real, rel, nil
		}
	}
	return "", "", fmt.Errorf("%s is in no writable root: %w", p, safefs.ErrUnsafePath)
}

// mkdirBeneath makes the directory p without following a symlink (an existing entry is an
// error matching os.ErrExist, as os.Mkdir).
func (g *gitProtector) mkdirBeneath(p string, perm os.FileMode) error {
	root, rel, err := g.beneath(p)
	if err != nil {
		return err
	}
	return safefs.Mkdir(root, rel, perm)
}

// createBeneath creates the file p (O_EXCL) holding content, without following a symlink.
// A file it made but could not fill is removed again (through the same root).
func (g *gitProtector) createBeneath(p string, perm os.FileMode, content string) error {
	root, rel, err := g.beneath(p)
	if err != nil {
		return err
	}
	f, err := safefs.CreateExcl(root, rel, perm)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(p)
		return fmt.Errorf("fill %s: %w", p, werr)
	}
	return nil
}
