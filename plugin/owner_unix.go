// SPDX-License-Identifier: MIT

//go:build unix

package plugin

import (
	"os"
	"syscall"
)

// rootOwned: p is owned by root and not writable by group or others.
func rootOwned(p string) bool {
	st, err := os.Stat(p)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Uid == 0 && st.Mode().Perm()&0o022 == 0
}
