// SPDX-License-Identifier: MIT

package linux

import "golang.org/x/sys/unix"

// symlinkFree reports whether no component of the absolute path p is a symlink (nor a
// /proc magic link): the kernel's lookup with RESOLVE_NO_SYMLINKS succeeds only then. False
// when it cannot tell (p absent, the kernel older than openat2, no permission), and the
// caller resolves p the slow way.
func symlinkFree(p string) bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
