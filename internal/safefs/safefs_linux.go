// SPDX-License-Identifier: MIT

package safefs

import (
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxEAGAIN bounds openat2 retries (a concurrent rename anywhere on the system can make it
// answer EAGAIN); after that the element-by-element walk, which has no such failure, does.
const maxEAGAIN = 16

// noOpenat2 is set once openat2 turns out to be missing or forbidden (an older kernel, or
// fledge itself running under a seccomp filter that answers ENOSYS, as its own does).
var noOpenat2 atomic.Bool

// openBeneath opens the directory rel beneath rfd in one openat2 call: RESOLVE_BENEATH
// refuses leaving it, RESOLVE_NO_SYMLINKS any symlink on the way (ELOOP), and
// RESOLVE_NO_MAGICLINKS /proc-style links. Where openat2 is unavailable it walks.
func openBeneath(root, rel string, rfd int, elems []string) (int, error) {
	if len(elems) == 0 {
		return unix.Dup(rfd)
	}
	if !noOpenat2.Load() {
		how := unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		}
		clean := filepath.Join(elems...)
		for i := 0; i < maxEAGAIN; i++ {
			fd, err := unix.Openat2(rfd, clean, &how)
			switch err {
			case nil:
				return fd, nil
			case unix.EAGAIN, unix.EINTR:
				continue
			case unix.ELOOP, unix.EXDEV, unix.ENOTDIR:
				// Find the element to blame (and tell a symlink from a file).
				return walk(root, rel, rfd, elems, false, 0)
			case unix.ENOSYS, unix.EPERM, unix.E2BIG:
				noOpenat2.Store(true)
			default:
				return -1, &os.PathError{Op: "openat2", Path: filepath.Join(root, rel), Err: err}
			}
			break
		}
	}
	return walk(root, rel, rfd, elems, false, 0)
}

// renameNoReplace is renameat2(RENAME_NOREPLACE): the kernel refuses an existing target.
func renameNoReplace(dirfd int, from, to string) error {
	return unix.Renameat2(dirfd, from, dirfd, to, unix.RENAME_NOREPLACE)
}
