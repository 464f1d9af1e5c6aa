// SPDX-License-Identifier: MIT

//go:build unix

package wasm

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkCacheDirOwner refuses a cache dir (symlinks resolved) that anyone but this user (or
// root) could write to or replace: the dir itself must be owned by this user and writable by
// no one else, and every ancestor owned by this user or root and writable by no one else,
// unless it is sticky (as /tmp is), where others cannot rename or remove what is ours.
func checkCacheDirOwner(dir string) error {
	uid := uint32(os.Geteuid())
	for p, first := dir, true; ; first = false {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCacheDir, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%w: cannot tell who owns %s", ErrCacheDir, p)
		}
		mode := fi.Mode()
		switch {
		case first && st.Uid != uid:
			return fmt.Errorf("%w: %s is owned by uid %d, not this user", ErrCacheDir, p, st.Uid)
		case st.Uid != uid && st.Uid != 0:
			return fmt.Errorf("%w: its ancestor %s is owned by uid %d", ErrCacheDir, p, st.Uid)
		case mode.Perm()&0o022 != 0 && (first || mode&os.ModeSticky == 0):
			return fmt.Errorf("%w: %s is writable by others (mode %v)", ErrCacheDir, p, mode.Perm())
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}
