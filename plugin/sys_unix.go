// SPDX-License-Identifier: MIT

//go:build unix

package plugin

import (
	"os"
	"syscall"
)

// oNoFollow refuses to open a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW

// tryLockFile takes an exclusive flock on f without waiting (EWOULDBLOCK when held).
func tryLockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// hardLinks is the file's link count (0 when unknown).
func hardLinks(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}
