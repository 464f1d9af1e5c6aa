// SPDX-License-Identifier: MIT

//go:build unix

package tools

import (
	"os"
	"syscall"
)

// inodeOf is fi's inode number, when the platform gives one.
func inodeOf(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Ino), true
}
