// SPDX-License-Identifier: MIT

//go:build unix && !linux

package safefs

import "golang.org/x/sys/unix"

// openBeneath walks rel element by element (O_NOFOLLOW each): these systems have no
// openat2, and the walk refuses every symlink just as RESOLVE_NO_SYMLINKS does.
func openBeneath(root, rel string, rfd int, elems []string) (int, error) {
	return walk(root, rel, rfd, elems, false, 0)
}

// renameNoReplace: these systems have no RENAME_NOREPLACE; a look first leaves a window in
// which a new target would be replaced (fledge renames only names nobody else uses).
func renameNoReplace(dirfd int, from, to string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, to, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return unix.EEXIST
	}
	return unix.Renameat(dirfd, from, dirfd, to)
}
