package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// buildView turns spec (rw: its writable roots plus the private tmp) into the private
// filesystem view: every grant bound in (read+exec and read-only ones read-only), the
// implicit system paths, and the protected paths of the writable roots.
func buildView(spec *sandbox.Spec, rw []string) (*kernel.View, error) {
	v := &kernel.View{}
	add := func(paths []string, w bool) {
		for _, p := range paths {
			v.Mounts = append(v.Mounts, kernel.ViewMount{Path: p, Writable: w})
		}
	}
	add(rw, true)
	add(implicitReadWrite, true)
	add(spec.Access.ReadOnly, false)
	add(implicitReadOnly, false)
	add(spec.Access.ReadExec, false)
	protected := spec.Access.Protected
	if protected == nil {
		protected = defaultProtected(spec.Access.ReadWrite)
	}
	for _, p := range protected {
		v.Protected = append(v.Protected, p)
		if parent := filepath.Dir(p); filepath.Base(parent) == ".git" {
			v.Pin = append(v.Pin, parent)
		}
	}
	if spec.Dir != nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(spec.Dir.Fd()), &st); err != nil {
			return nil, fmt.Errorf("%w: stat working directory: %w", sandbox.ErrLaunch, err)
		}
		// The view is entered by path; the handle's identity is checked there, so a path
		// that now names something else fails instead of leading elsewhere.
		dir := spec.DirPath
		if dir == "" {
			var err error
			if dir, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", spec.Dir.Fd())); err != nil {
				return nil, fmt.Errorf("%w: working directory path: %w", sandbox.ErrLaunch, err)
			}
		}
		v.Dir, v.DirDev, v.DirIno = dir, st.Dev, st.Ino
	}
	return v, nil
}

// defaultProtected is .git/hooks and .git/config of every writable root that is a git
// repository. A repository without a hooks directory gets an empty one (git init makes
// it too), so that a command cannot create it and plant a hook there.
func defaultProtected(roots []string) []string {
	var out []string
	for _, r := range roots {
		g := filepath.Join(r, ".git")
		st, err := os.Lstat(g)
		if err != nil || !st.IsDir() {
			continue // not a repository, or a worktree/submodule .git file (not covered yet)
		}
		hooks := filepath.Join(g, "hooks")
		if err := os.Mkdir(hooks, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			continue
		}
		out = append(out, hooks, filepath.Join(g, "config"))
	}
	return out
}
